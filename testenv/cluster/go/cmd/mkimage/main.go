// mkimage writes a container image as a docker-archive tarball (the layout `docker save`
// writes and `ctr images import` reads: manifest.json, the image config, one layer) from a
// rootfs layer tarball, so the real nodes get their images without a registry or a daemon.
// The format is three small files; the standard library writes it, no image library needed.
package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"
)

type imageConfig struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Created      time.Time `json:"created"`
	Config       struct {
		Env        []string `json:"Env"`
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
		User       string   `json:"User,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type manifestEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

type tags []string

func (t *tags) String() string     { return strings.Join(*t, ",") }
func (t *tags) Set(s string) error { *t = append(*t, s); return nil }

func main() {
	out := flag.String("o", "", "the image tarball to write")
	layer := flag.String("layer", "", "the rootfs as an uncompressed tar")
	entrypoint := flag.String("entrypoint", "", "the entrypoint, a JSON array")
	cmd := flag.String("cmd", "", "the command, a JSON array")
	user := flag.String("user", "", "the user the container runs as")
	var names tags
	flag.Var(&names, "t", "a name:tag of the image (repeatable)")
	flag.Parse()
	if *out == "" || *layer == "" || len(names) == 0 {
		log.Fatal("mkimage: -o, -layer and at least one -t are required")
	}

	layerBytes, err := os.ReadFile(*layer)
	check(err)
	layerSum := sha256.Sum256(layerBytes)
	layerID := hex.EncodeToString(layerSum[:])

	var cfg imageConfig
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Config.User = *user
	if *entrypoint != "" {
		check(json.Unmarshal([]byte(*entrypoint), &cfg.Config.Entrypoint))
	}
	if *cmd != "" {
		check(json.Unmarshal([]byte(*cmd), &cfg.Config.Cmd))
	}
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{"sha256:" + layerID}
	cfgBytes, err := json.Marshal(cfg)
	check(err)
	cfgSum := sha256.Sum256(cfgBytes)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	layerName := layerID + "/layer.tar"
	manifest, err := json.Marshal([]manifestEntry{{Config: cfgName, RepoTags: names, Layers: []string{layerName}}})
	check(err)

	f, err := os.Create(*out)
	check(err)
	w := tar.NewWriter(f)
	for _, file := range []struct {
		name string
		body []byte
	}{{cfgName, cfgBytes}, {layerName, layerBytes}, {"manifest.json", manifest}} {
		check(w.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.body)), Typeflag: tar.TypeReg}))
		_, err := io.Copy(w, strings.NewReader(string(file.body)))
		check(err)
	}
	check(w.Close())
	check(f.Close())
	fmt.Fprintf(os.Stderr, "mkimage: %s (%s)\n", *out, names.String())
}

func check(err error) {
	if err != nil {
		log.Fatal("mkimage: ", err)
	}
}
