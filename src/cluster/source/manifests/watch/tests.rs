// These tests use the real file system and inotify, and real time: the timeouts are generous
// upper bounds for correctness, not timing assertions.
use std::io::Write;
use std::path::Path;

use futures::StreamExt;

use super::*;
use crate::cluster::source::{Kind, Object};

const PATIENCE: Duration = Duration::from_secs(10);

fn write(dir: &Path, name: &str, text: &str) {
    let mut file = std::fs::File::create(dir.join(name)).expect("create fixture");
    file.write_all(text.as_bytes()).expect("write fixture");
}

fn service(name: &str) -> String {
    format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: demo}}\n")
}

fn names(objects: &[Object]) -> Vec<String> {
    let mut names: Vec<String> = objects
        .iter()
        .map(|o| match o {
            Object::Service(s) => s.metadata.name.clone().unwrap_or_default(),
            Object::EndpointSlice(s) => s.metadata.name.clone().unwrap_or_default(),
            Object::Node(n) => n.metadata.name.clone().unwrap_or_default(),
            Object::ServiceCidr(c) => c.metadata.name.clone().unwrap_or_default(),
        })
        .collect();
    names.sort();
    names
}

/// The next event, or a test failure after [`PATIENCE`].
async fn next(watch: &mut Watch) -> Event {
    tokio::time::timeout(PATIENCE, watch.next())
        .await
        .expect("an event in time")
        .expect("stream open")
}

/// Reads events until a Service list satisfies `want`, returning that list's names.
async fn services_until(watch: &mut Watch, want: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let event = tokio::time::timeout_at(deadline, watch.next())
            .await
            .expect("the wanted list in time");
        if let Some(Event::Listed(Kind::Service, objects)) = event {
            let names = names(&objects);
            if want(&names) {
                return names;
            }
        }
    }
}

async fn initial_lists(watch: &mut Watch) -> Vec<(Kind, Vec<String>)> {
    let mut lists = Vec::new();
    for _ in Kind::ALL {
        match next(watch).await {
            Event::Listed(kind, objects) => lists.push((kind, names(&objects))),
            other => panic!("only lists expected, got {other:?}"),
        }
    }
    lists
}

#[tokio::test]
async fn starts_with_a_list_per_kind_then_relists_after_a_new_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &service("alpha"));
    let mut watch = watch(dir.path().to_owned()).unwrap();
    let want = vec![
        (Kind::Service, vec!["alpha".to_owned()]),
        (Kind::EndpointSlice, vec![]),
        (Kind::Node, vec![]),
        (Kind::ServiceCidr, vec![]),
    ];
    assert_eq!(initial_lists(&mut watch).await, want);

    write(dir.path(), "b.yaml", &service("beta"));
    let names = services_until(&mut watch, |n| n.len() == 2).await;
    assert_eq!(names, ["alpha", "beta"]);

    std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
    let names = services_until(&mut watch, |n| n.len() == 1).await;
    assert_eq!(names, ["beta"]);
}

#[tokio::test]
async fn a_removed_directory_keeps_the_last_state_until_it_returns() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("manifests");
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "a.yaml", &service("alpha"));
    let mut watch = watch(dir.clone()).unwrap();
    initial_lists(&mut watch).await;

    std::fs::remove_dir_all(&dir).unwrap();
    // Nothing is emitted while the directory is gone: no empty lists that would drop services.
    let quiet = tokio::time::timeout(Duration::from_secs(1), watch.next()).await;
    assert!(quiet.is_err(), "unexpected event {quiet:?}");

    std::fs::create_dir(&dir).unwrap();
    write(&dir, "g.yaml", &service("gamma"));
    let names = services_until(&mut watch, |n| n.iter().any(|n| n == "gamma")).await;
    assert_eq!(names, ["gamma"]);
}

#[test]
fn a_missing_directory_cannot_be_watched() {
    let parent = tempfile::tempdir().unwrap();
    assert!(matches!(
        watch(parent.path().join("nope")),
        Err(Error::Watch { .. })
    ));
}

#[test]
fn reads_are_not_changes_but_writes_are() {
    let access =
        |mode| notify::Event::new(EventKind::Access(mode)).add_path(PathBuf::from("/d/a.yaml"));
    assert!(!is_change(&access(AccessKind::Open(AccessMode::Any))));
    assert!(!is_change(&access(AccessKind::Close(AccessMode::Read))));
    assert!(is_change(&access(AccessKind::Close(AccessMode::Write))));
    let create = |name: &str| {
        notify::Event::new(EventKind::Create(notify::event::CreateKind::File))
            .add_path(PathBuf::from(name))
    };
    assert!(!is_change(&create("/d/.a.yaml.swp")));
    assert!(is_change(&create("/d/..data")));
}
