// Test code writes fixture files; `std::fs::write` is disallowed crate-wide, so files are
// created with `File::create` + `write_all` (also allowed: this is the I/O seam's own test).
use std::io::Write;

use super::*;
use crate::cluster::source::manifests::identity::label;

fn write(dir: &Path, name: &str, text: &str) {
    let mut file = std::fs::File::create(dir.join(name)).expect("create fixture");
    file.write_all(text.as_bytes()).expect("write fixture");
}

fn service(name: &str, cluster_ip: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec: {{clusterIP: {cluster_ip}}}\n"
    )
}

fn labels(loaded: &Loaded) -> Vec<String> {
    loaded.objects.iter().map(label).collect()
}

fn file_names(loaded: &Loaded) -> Vec<String> {
    loaded
        .files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn files_are_read_in_name_order_and_others_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "b.yaml", &service("b", "10.96.0.2"));
    write(
        d,
        "a.json",
        r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}}"#,
    );
    write(d, "c.YML", &service("c", "10.96.0.3"));
    for ignored in [
        ".hidden.yaml",
        ".#a.yaml",
        "a.yaml~",
        ".a.yaml.swp",
        "notes.txt",
        "yaml",
        ".yaml",
    ] {
        write(d, ignored, &service("ignored", "10.96.0.9"));
    }
    std::fs::create_dir(d.join("sub.yaml")).unwrap();
    write(
        &d.join("sub.yaml"),
        "deep.yaml",
        &service("deep", "10.96.0.8"),
    );

    let loaded = load_dir(d).unwrap();
    assert_eq!(loaded.warnings, []);
    assert_eq!(file_names(&loaded), ["a.json", "b.yaml", "c.YML"]);
    assert_eq!(
        labels(&loaded),
        [
            "Service default/a",
            "Service default/b",
            "Service default/c"
        ]
    );
}

#[test]
fn a_duplicate_in_a_later_file_wins_with_both_files_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "1-first.yaml", &service("web", "10.96.0.1"));
    write(d, "2-second.yaml", &service("web", "10.96.0.2"));
    let loaded = load_dir(d).unwrap();
    let [Object::Service(web)] = loaded.objects.as_slice() else {
        panic!("one Service")
    };
    assert_eq!(
        web.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some("10.96.0.2")
    );
    let [warning] = loaded.warnings.as_slice() else {
        panic!("one warning")
    };
    let text = warning.to_string();
    assert!(
        text.contains("2-second.yaml document 1") && text.contains("1-first.yaml document 1"),
        "{text}"
    );
}

#[test]
fn an_unreadable_file_is_a_warning_and_the_rest_still_loads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "good.yaml", &service("good", "10.96.0.1"));
    let mut bad = std::fs::File::create(d.join("latin1.yaml")).unwrap();
    bad.write_all(b"kind: Service # caf\xe9\n").unwrap();
    std::os::unix::fs::symlink(d.join("missing"), d.join("dangling.yaml")).unwrap();
    let loaded = load_dir(d).unwrap();
    assert_eq!(labels(&loaded), ["Service default/good"]);
    let mut problems: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    problems.sort();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("dangling.yaml: cannot read"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("latin1.yaml: cannot read: not UTF-8"),
        "{problems:?}"
    );
}

#[test]
fn a_missing_directory_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let error = load_dir(&missing).unwrap_err();
    assert!(
        error.to_string().contains(&missing.display().to_string()),
        "{error}"
    );
}

#[test]
fn events_list_every_kind_even_when_empty() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "s.yaml", &service("s", "10.96.0.1"));
    let events = load_dir(dir.path()).unwrap().into_events();
    let summary: Vec<(Kind, usize)> = events
        .iter()
        .map(|e| match e {
            Event::Listed(kind, objects) => (*kind, objects.len()),
            other => panic!("only lists expected, got {other:?}"),
        })
        .collect();
    assert_eq!(
        summary,
        [
            (Kind::Service, 1),
            (Kind::EndpointSlice, 0),
            (Kind::Node, 0),
            (Kind::ServiceCidr, 0)
        ]
    );
}

#[test]
fn service_cidrs_load_alone_and_in_their_typed_list() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "cidrs.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata:\n  name: kubernetes\n\
         spec:\n  cidrs: [10.96.0.0/16, fd00:10:96::/112]\n---\n\
         apiVersion: networking.k8s.io/v1\nkind: ServiceCIDRList\nitems:\n\
         - metadata:\n    name: extra\n  spec:\n    cidrs: [10.100.0.0/16]\n---\n\
         apiVersion: networking.k8s.io/v1beta1\nkind: ServiceCIDR\nmetadata:\n  name: old\n",
    );
    let loaded = load_dir(dir.path()).unwrap();
    let names: Vec<String> = loaded
        .objects
        .iter()
        .map(|o| match o {
            Object::ServiceCidr(c) => c.metadata.name.clone().unwrap_or_default(),
            other => panic!("only ServiceCIDRs expected, got {other:?}"),
        })
        .collect();
    assert_eq!(names, ["kubernetes", "extra"]);
    // Another version of the kind is meant for us: a warning that names the one we read.
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(
        loaded.warnings[0]
            .to_string()
            .contains("networking.k8s.io/v1"),
        "{}",
        loaded.warnings[0]
    );
}

#[test]
fn the_example_cluster_loads_without_warnings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    let loaded = load_dir(&dir).unwrap();
    assert_eq!(loaded.warnings, [], "{:#?}", loaded.warnings);
    assert_eq!(loaded.skipped, []);
    let count = |kind| loaded.objects.iter().filter(|o| o.kind() == kind).count();
    assert_eq!(count(Kind::Node), 3);
    assert_eq!(count(Kind::Service), 15);
    assert!(
        count(Kind::EndpointSlice) >= 14,
        "{}",
        count(Kind::EndpointSlice)
    );
}

#[test]
fn manifest_names_are_chosen_by_extension_and_hiddenness() {
    assert!(is_manifest("web.yaml") && is_manifest("dns.json") && is_manifest("x.YML"));
    for name in [
        ".web.yaml",
        "..data",
        "web.yaml~",
        "web.yaml.swp",
        "web.txt",
        ".yaml",
    ] {
        assert!(!is_manifest(name), "{name}");
    }
    assert!(
        is_editor_scratch(".web.yaml.swp")
            && is_editor_scratch("web.yaml~")
            && is_editor_scratch(".#web.yaml")
    );
    assert!(!is_editor_scratch("..data") && !is_editor_scratch("web.yaml"));
}
