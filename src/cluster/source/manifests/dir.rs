//! A manifest directory read once: every manifest file, in name order, merged into one set of
//! objects. Backs `kube-proxy-rs plan --manifests DIR` and each re-read of the watcher.
//!
//! This is the I/O seam of the manifest source: the only code here that touches the file system
//! is [`load_dir`] and [`read_file`]; choosing files and merging them is pure. It guarantees a
//! deterministic result for the same directory content (name order, document order, last wins)
//! and that an unreadable file never stops the others. It must never recurse into directories,
//! write anything, or log: warnings are returned, and [`Loaded::log`] is for the caller.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::parse::{MAX_TEXT_BYTES, parse_found};
use super::warning::{Place, Problem, Skipped, Warning};
use super::{Error, identity};
use crate::cluster::source::{Event, Kind, Object};

/// Everything one read of a directory yielded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Loaded {
    /// Files read, in the order they were read (by name).
    pub files: Vec<PathBuf>,
    /// Objects in file then document order, one per (kind, namespace, name): the last file (by
    /// name) or document that defines an object wins, and each override is a warning.
    pub objects: Vec<Object>,
    pub warnings: Vec<Warning>,
    pub skipped: Vec<Skipped>,
}

impl Loaded {
    /// One [`Event::Listed`] per kind in [`Kind::ALL`] order: the complete state this directory
    /// describes, what a tracker needs to replace whatever it held before.
    pub fn into_events(self) -> Vec<Event> {
        let mut by_kind: [Vec<Object>; Kind::ALL.len()] = Default::default();
        for object in self.objects {
            by_kind[Kind::ALL
                .iter()
                .position(|k| *k == object.kind())
                .unwrap_or(0)]
            .push(object);
        }
        Kind::ALL
            .into_iter()
            .zip(by_kind)
            .map(|(kind, objects)| Event::Listed(kind, objects))
            .collect()
    }

    /// Logs every warning (warn) and every skipped document (debug).
    pub fn log(&self) {
        self.warnings.iter().for_each(log_warning);
        self.skipped.iter().for_each(log_skipped);
    }
}

pub(super) fn log_warning(w: &Warning) {
    tracing::warn!(origin = %w.place, object = w.object.as_deref(), error = %w.problem, "manifest skipped");
}

pub(super) fn log_skipped(s: &Skipped) {
    tracing::debug!(
        origin = %s.place,
        object = s.object.as_deref(),
        r#type = %s.type_name,
        "manifest of a kind the proxy does not use skipped",
    );
}

/// Whether a file name is read as a manifest: `.yaml`, `.yml` or `.json` (any case), and not a
/// hidden file or an editor's temporary file (`.#name`, `name~`, `.name.swp`; the ones ending in
/// `.yaml` are all hidden). Hidden entries also cover Kubernetes' `..data` links in a mounted
/// ConfigMap, whose visible links are the files we want.
pub(super) fn is_manifest(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let extension = [".yaml", ".yml", ".json"]
        .iter()
        .any(|ext| lower.ends_with(ext) && lower.len() > ext.len());
    extension && !name.starts_with('.')
}

/// Whether a name is an editor's scratch file, whose changes never need a re-read.
pub(super) fn is_editor_scratch(name: &str) -> bool {
    name.starts_with(".#")
        || name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || name == "4913" // vim's probe that the directory is writable
}

/// Reads every manifest file of `dir` (not its subdirectories). Fails only if the directory itself
/// cannot be listed; a file that cannot be read is a warning.
pub fn load_dir(dir: &Path) -> Result<Loaded, Error> {
    let read_dir_error = |source| Error::ReadDir {
        path: dir.to_owned(),
        source,
    };
    let mut loaded = Loaded::default();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir_error)? {
        match entry {
            Ok(entry) => names.push(entry.file_name()),
            Err(e) => loaded.warnings.push(Warning {
                place: Place::text(&dir.display().to_string()),
                object: None,
                problem: Problem::Unreadable(e.to_string()),
            }),
        }
    }
    names.sort();
    let mut found = Vec::new();
    for name in names.iter().filter(|n| n.to_str().is_some_and(is_manifest)) {
        let path = dir.join(name);
        let origin = path.display().to_string();
        match read_file(&path) {
            Ok(None) => continue, // a directory named like a manifest
            Ok(Some(text)) => {
                let parsed = parse_found(&text, &origin);
                found.extend(parsed.objects);
                loaded.warnings.extend(parsed.warnings);
                loaded.skipped.extend(parsed.skipped);
                loaded.files.push(path);
            }
            Err(problem) => loaded.warnings.push(Warning {
                place: Place::text(&origin),
                object: None,
                problem,
            }),
        }
    }
    let (objects, duplicates) = identity::dedupe(found);
    loaded.objects = objects;
    loaded.warnings.extend(duplicates);
    Ok(loaded)
}

/// A file's text; `None` if the path is not a regular file (after following links). Reads at most
/// one byte past [`MAX_TEXT_BYTES`], so a huge or endless file costs bounded memory.
fn read_file(path: &Path) -> Result<Option<String>, Problem> {
    let unreadable = |e: std::io::Error| Problem::Unreadable(e.to_string());
    let metadata = std::fs::metadata(path).map_err(unreadable)?;
    if !metadata.is_file() {
        return Ok(None);
    }
    let too_large = |len| Problem::TooLarge {
        len,
        max: MAX_TEXT_BYTES,
    };
    let len = usize::try_from(metadata.len()).unwrap_or(usize::MAX);
    if len > MAX_TEXT_BYTES {
        return Err(too_large(len));
    }
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(MAX_TEXT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() > MAX_TEXT_BYTES {
        return Err(too_large(bytes.len())); // grew while we read it
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| Problem::Unreadable(format!("not UTF-8: {e}")))
}

#[cfg(test)]
mod tests;
