//! The docs name only paths that exist. `docs/architecture.md`, `docs/testing.md` and
//! `docs/operations.md` are read, every path-like reference in them is checked against the
//! repository, and the test fails naming each one that is missing, with its line. No root, no
//! network: it reads files.
//!
//! What counts as a reference, and where it must exist:
//!
//! 1. **Rooted paths**, anywhere in the text (prose, code spans, code blocks): a word that starts
//!    with `src/`, `tests/`, `bpf/`, `deploy/`, `benches/`, `examples/`, `testenv/`, `docs/` or
//!    `.ci/` (not preceded by a path character, so a URL's tail is not one), cut at the first
//!    character that cannot be in a path (a placeholder's `<`, a glob's `*`, a space) and
//!    stripped of trailing punctuation. It must exist relative to the repository root, unless
//!    it lies under what the root `.gitignore` names (build output and run state, such as
//!    `target/` or `testenv/bin/`): those are made by a run, not kept in the repository.
//! 2. **Relative paths**, in a code span: lowercase path segments (`a-z`, digits, `_`, `-`,
//!    `/`), optionally ending in `/`, that either end in a source file's extension (`.rs`, `.c`,
//!    `.h`, `.go`, `.md`, `.toml`, `.yaml`, `.sh`) or contain a `/` and start with the name of a
//!    folder of the repository. Such a path is relative to wherever the prose is (`source/lean.rs`,
//!    `dataplane/nftables/plan`), so it must be the tail of some file or folder path under
//!    `src/`, `tests/`, `bpf/`, `benches/`, `examples/`, `testenv/` or `deploy/`, or a path
//!    from the repository root (`deny.toml`). Other spans with a `/` (`application/json`,
//!    `connect4/6`) are not paths and are not checked.
//! 3. **Rust paths**, in a code span: `a::b::c` (optionally `()`) whose first segment names a
//!    module of `src/` or `tests/` (another crate's path, such as `kube::Client`, is not
//!    checked). The longest run of leading segments that names a module file (`…/a/b.rs` or
//!    `…/a/b/mod.rs`) must exist, and every segment after it (an item, a variant) must appear as
//!    a word in that module's file, or, for a folder module, in one of its files.
//! 4. **The folder map** (`architecture.md`'s code block that starts with `src/`): each entry
//!    (the leading path-like words of a line, before the description column), nested by
//!    indentation under the folder above it, must exist.
//! 5. **The parts table** (`architecture.md`'s table whose header starts `| Part |`): its
//!    columns after the first two are exactly the five modes, one per folder of
//!    `src/dataplane/` that has an `apply`; a relative path in a mode's column is inside that
//!    mode's folder (`src/dataplane/<mode>/`) unless its first segment is a folder of `src/`
//!    (`dataplane/cleanup.rs`, `cli/run.rs`: then it is relative to `src/`), and a type name
//!    in a code span there (`IpvsDataplane`) appears in that folder's code.

#![allow(
    clippy::disallowed_methods,
    reason = "reads the docs and lists the repository"
)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The docs checked, relative to the repository root.
const DOCS: [&str; 3] = [
    "docs/architecture.md",
    "docs/testing.md",
    "docs/operations.md",
];

/// Where a rooted path may start.
const ROOTS: [&str; 9] = [
    "src/",
    "tests/",
    "bpf/",
    "deploy/",
    "benches/",
    "examples/",
    "testenv/",
    "docs/",
    ".ci/",
];

/// The folders a relative path or a module is looked for in.
const TREES: [&str; 7] = [
    "src", "tests", "bpf", "benches", "examples", "testenv", "deploy",
];

/// Extensions that make a code span a file name.
const EXTENSIONS: [&str; 8] = [".rs", ".c", ".h", ".go", ".md", ".toml", ".yaml", ".sh"];

/// The modes whose folders the parts table describes.
const MODES: [&str; 5] = ["nftables", "iptables", "ipvs", "userspace", "ebpf"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file and folder under [`TREES`], relative to the root with `/` separators.
struct Tree {
    files: Vec<String>,
    dirs: Vec<String>,
}

impl Tree {
    fn read(root: &Path) -> Tree {
        let mut tree = Tree {
            files: Vec::new(),
            dirs: Vec::new(),
        };
        for top in TREES {
            tree.walk(root, top);
        }
        tree
    }

    fn walk(&mut self, root: &Path, rel: &str) {
        let Ok(entries) = fs::read_dir(root.join(rel)) else {
            return;
        };
        self.dirs.push(rel.to_string());
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = format!("{rel}/{name}");
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                self.walk(root, &path);
            } else {
                self.files.push(path);
            }
        }
    }

    /// Whether some file or folder's path is `tail` or ends with `/tail`.
    fn has_tail(&self, tail: &str) -> bool {
        let tail = tail.trim_end_matches('/');
        let ends = |p: &String| p == tail || p.ends_with(&format!("/{tail}"));
        self.files.iter().any(ends) || self.dirs.iter().any(ends)
    }

    /// Whether some folder is named `name`.
    fn has_dir_named(&self, name: &str) -> bool {
        self.dirs.iter().any(|d| d.rsplit('/').next() == Some(name))
    }

    /// The files of the module `segments` (`a/b.rs`, or every file under `a/b/` when it has a
    /// `mod.rs`), under `src/` or `tests/`.
    fn module_files(&self, segments: &[&str]) -> Vec<String> {
        let rel = segments.join("/");
        let in_tree = |p: &String| p.starts_with("src/") || p.starts_with("tests/");
        let mut found: Vec<String> = self
            .files
            .iter()
            .filter(|p| in_tree(p))
            .filter(|p| p.ends_with(&format!("/{rel}.rs")))
            .cloned()
            .collect();
        for dir in self
            .dirs
            .iter()
            .filter(|d| in_tree(d) && d.ends_with(&format!("/{rel}")))
        {
            if self.files.contains(&format!("{dir}/mod.rs")) {
                let prefix = format!("{dir}/");
                found.extend(
                    self.files
                        .iter()
                        .filter(|f| f.starts_with(&prefix) && f.ends_with(".rs"))
                        .cloned(),
                );
            }
        }
        found
    }
}

/// The root `.gitignore`'s entries, as path prefixes (`target/`, `testenv/bin/`).
fn ignored(root: &Path) -> Vec<String> {
    fs::read_to_string(root.join(".gitignore"))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| format!("{}/", l.trim_start_matches('/').trim_end_matches('/')))
        .collect()
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// Rule 1: every rooted path in `text`, with its line.
fn rooted_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (start, c) in text.char_indices() {
        if !(c.is_ascii_alphabetic() || c == '.') {
            continue;
        }
        if text[..start].chars().next_back().is_some_and(is_path_char) {
            continue;
        }
        let rest = &text[start..];
        if !ROOTS.iter().any(|r| rest.starts_with(r)) {
            continue;
        }
        let end = rest.find(|c: char| !is_path_char(c)).unwrap_or(rest.len());
        let path = rest[..end].trim_end_matches(['.', ',', ':', ';']);
        found.push((line_of(text, start), path.to_string()));
    }
    found
}

/// Every code span outside code blocks, with its line.
fn code_spans(text: &str) -> Vec<(usize, String)> {
    // Code blocks blanked (lines kept), so their backticks do not pair with the prose's.
    let mut prose = String::with_capacity(text.len());
    let mut in_block = false;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            prose.push('\n');
        } else if in_block {
            prose.push('\n');
        } else {
            prose.push_str(line);
        }
    }
    let mut spans = Vec::new();
    let mut offset = 0;
    for (i, piece) in prose.split('`').enumerate() {
        if i % 2 == 1 && !piece.contains('\n') {
            spans.push((line_of(&prose, offset), piece.trim().to_string()));
        }
        offset += piece.len() + 1;
    }
    spans
}

/// Rule 2's syntax: lowercase segments, an optional trailing `/`.
fn relative_syntax(span: &str) -> bool {
    !span.is_empty()
        && !span.starts_with(['/', '.', '-'])
        && !span.contains("//")
        && span.chars().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '/' | '.')
        })
        && span.matches('.').count() <= 1
        && (!span.contains('.') || EXTENSIONS.iter().any(|e| span.ends_with(e)))
}

/// Rule 2: whether `span` is a relative path to check.
fn is_relative_path(tree: &Tree, span: &str) -> bool {
    if !relative_syntax(span) || ROOTS.iter().any(|r| span.starts_with(r)) {
        return false;
    }
    let first = span.split('/').next().unwrap_or_default();
    EXTENSIONS.iter().any(|e| span.ends_with(e))
        || (span.contains('/') && tree.has_dir_named(first))
}

/// Rule 3: `None` when `span` is not a Rust path of ours; else whether it resolves.
fn rust_path_resolves(tree: &Tree, span: &str) -> Option<bool> {
    let path = span.strip_suffix("()").unwrap_or(span);
    let path = path
        .strip_prefix("crate::")
        .or_else(|| path.strip_prefix("kube_proxy_rs::"))
        .unwrap_or(path);
    let segments: Vec<&str> = path.split("::").collect();
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    if segments.len() < 2
        || !segments.iter().all(|s| ident(s))
        || !segments[0].starts_with(|c: char| c.is_ascii_lowercase())
    {
        return None;
    }
    for k in (1..=segments.len()).rev() {
        let files = tree.module_files(&segments[..k]);
        if files.is_empty() {
            continue;
        }
        let texts: Vec<String> = files
            .iter()
            .map(|f| fs::read_to_string(root().join(f)).unwrap_or_default())
            .collect();
        let found = segments[k..]
            .iter()
            .all(|name| texts.iter().any(|t| has_word(t, name)));
        return Some(found);
    }
    None
}

/// Whether `word` occurs in `text` as a whole identifier.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(ident)
            && !text[i + word.len()..].chars().next().is_some_and(ident)
    })
}

/// Rule 4: the folder map's entries as full paths, with their lines.
fn folder_map(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(open) = lines
        .windows(2)
        .position(|w| w[0].trim_start().starts_with("```") && w[1].trim_end() == "src/")
    else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    let mut parents: Vec<(usize, String)> = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(open + 1) {
        if line.trim_start().starts_with("```") {
            break;
        }
        let indent = line.len() - line.trim_start().len();
        let body = line.trim_start();
        let head = body.split("  ").next().unwrap_or_default().trim_end();
        let words: Vec<&str> = head.split(' ').collect();
        let path_like = |w: &&str| {
            !w.is_empty()
                && w.chars().all(is_path_char)
                && (w.ends_with('/') || EXTENSIONS.iter().any(|e| w.ends_with(e)))
        };
        if head.is_empty() || !words.iter().all(path_like) {
            continue;
        }
        while parents.last().is_some_and(|(depth, _)| *depth >= indent) {
            parents.pop();
        }
        let parent = parents.last().map(|(_, p)| p.clone()).unwrap_or_default();
        for word in &words {
            entries.push((i + 1, format!("{parent}{word}")));
        }
        if let [dir] = words[..]
            && dir.ends_with('/')
        {
            parents.push((indent, format!("{parent}{dir}")));
        }
    }
    entries
}

/// Rule 5's table: its header's mode columns and, per row, each mode's cell with its line.
struct PartsTable {
    modes: Vec<String>,
    cells: Vec<(usize, String, String)>,
}

fn parts_table(text: &str) -> Option<PartsTable> {
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().position(|l| l.starts_with("| Part |"))?;
    let cells_of = |line: &str| -> Vec<String> {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let modes: Vec<String> = cells_of(lines[header]).into_iter().skip(2).collect();
    let mut cells = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(header + 2) {
        if !line.starts_with('|') {
            break;
        }
        for (mode, cell) in modes.iter().zip(cells_of(line).into_iter().skip(2)) {
            cells.push((i + 1, mode.clone(), cell));
        }
    }
    Some(PartsTable { modes, cells })
}

/// Every problem in one doc, as `doc:line: what`.
fn check_doc(root: &Path, tree: &Tree, ignored: &[String], doc: &str) -> Vec<String> {
    let text = fs::read_to_string(root.join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let mut problems = Vec::new();
    for (line, path) in rooted_paths(&text) {
        if ignored
            .iter()
            .any(|i| format!("{path}/").starts_with(i.as_str()))
        {
            continue;
        }
        if !root.join(&path).exists() {
            problems.push(format!("{doc}:{line}: {path} does not exist"));
        }
    }
    let table_lines: BTreeSet<usize> = parts_table(&text)
        .map(|t| t.cells.iter().map(|(line, _, _)| *line).collect())
        .unwrap_or_default();
    for (line, span) in code_spans(&text) {
        if table_lines.contains(&line) {
            continue; // rule 5 reads the parts table's cells against their mode's folder
        }
        if is_relative_path(tree, &span) && !tree.has_tail(&span) && !root.join(&span).exists() {
            problems.push(format!(
                "{doc}:{line}: `{span}` is no file or folder's path"
            ));
        }
        if rust_path_resolves(tree, &span) == Some(false) {
            problems.push(format!(
                "{doc}:{line}: `{span}` names no item of that module"
            ));
        }
    }
    for (line, path) in folder_map(&text) {
        if !root.join(&path).exists() {
            problems.push(format!(
                "{doc}:{line}: folder map entry {path} does not exist"
            ));
        }
    }
    if let Some(table) = parts_table(&text) {
        problems.extend(check_parts_table(root, tree, doc, &table));
    }
    problems
}

/// Rule 5.
fn check_parts_table(root: &Path, tree: &Tree, doc: &str, table: &PartsTable) -> Vec<String> {
    let mut problems = Vec::new();
    let folders: Vec<String> = MODES
        .iter()
        .filter(|m| {
            let dir = root.join("src/dataplane").join(m);
            dir.join("apply.rs").exists() || dir.join("apply").is_dir()
        })
        .map(|m| m.to_string())
        .collect();
    if table.modes != folders {
        problems.push(format!(
            "{doc}: the parts table's modes are {:?}, the mode folders {folders:?}",
            table.modes
        ));
    }
    for (line, mode, cell) in &table.cells {
        let folder = format!("src/dataplane/{mode}");
        let code: String = tree
            .files
            .iter()
            .filter(|f| f.starts_with(&format!("{folder}/")) && f.ends_with(".rs"))
            .map(|f| fs::read_to_string(root.join(f)).unwrap_or_default())
            .collect();
        for span in cell.split('`').skip(1).step_by(2) {
            if ROOTS.iter().any(|r| span.starts_with(r)) {
                continue; // rule 1 checked it
            }
            if relative_syntax(span)
                && (span.contains('/') || EXTENSIONS.iter().any(|e| span.ends_with(e)))
            {
                let first = span.split('/').next().unwrap_or_default();
                let base = if span.contains('/') && root.join("src").join(first).is_dir() {
                    "src".to_string()
                } else {
                    folder.clone()
                };
                let path = format!("{base}/{}", span.trim_end_matches('/'));
                if !root.join(&path).exists() {
                    problems.push(format!("{doc}:{line}: {mode}: {path} does not exist"));
                }
            } else if span.starts_with(|c: char| c.is_ascii_uppercase())
                && span.chars().all(|c| c.is_ascii_alphanumeric())
                && !has_word(&code, span)
            {
                problems.push(format!(
                    "{doc}:{line}: {mode}: `{span}` is not in {folder}/"
                ));
            }
        }
    }
    problems
}

#[test]
fn the_docs_name_only_paths_that_exist() {
    let root = root();
    let tree = Tree::read(&root);
    let ignored = ignored(&root);
    let problems: Vec<String> = DOCS
        .iter()
        .flat_map(|doc| check_doc(&root, &tree, &ignored, doc))
        .collect();
    assert!(
        problems.is_empty(),
        "the docs name what does not exist:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_parts_table_covers_every_mode() {
    let text = fs::read_to_string(root().join("docs/architecture.md")).expect("architecture.md");
    let table = parts_table(&text).expect("a table whose header starts `| Part |`");
    assert_eq!(table.modes, MODES.map(String::from));
    let rows = table.cells.len() / MODES.len();
    assert!(rows >= 8, "{rows} rows");
    for (line, mode, cell) in &table.cells {
        assert!(!cell.is_empty(), "line {line}: {mode}'s cell is empty");
    }
}

/// The checker itself: each rule finds what it should, so a green run means something.
#[test]
fn the_checker_finds_missing_paths() {
    let root = root();
    let tree = Tree::read(&root);
    let spans: Vec<String> = code_spans("a `src/x` b `source/lean.rs` c\n```\n`no`\n```\n`d/e`")
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(spans, ["src/x", "source/lean.rs", "d/e"]);
    assert_eq!(
        rooted_paths("see src/main.rs, https://x/src/no and src/dataplane/<mode>/."),
        [
            (1, "src/main.rs".to_string()),
            (1, "src/dataplane/".to_string())
        ]
    );
    assert!(is_relative_path(&tree, "source/lean.rs") && tree.has_tail("source/lean.rs"));
    assert!(is_relative_path(&tree, "dataplane/monitor.rs"));
    assert!(!tree.has_tail("dataplane/monitor.rs"));
    assert!(!is_relative_path(&tree, "application/json"));
    assert_eq!(
        rust_path_resolves(&tree, "dataplane::modes::of"),
        Some(true)
    );
    assert_eq!(
        rust_path_resolves(&tree, "dataplane::modes::no_such_item"),
        Some(false)
    );
    assert_eq!(rust_path_resolves(&tree, "kube::Client"), None);
    let map =
        "```\nsrc/\n  main.rs      x\n  dataplane/\n    gone.rs    y\n               z.rs w\n```\n";
    assert_eq!(
        folder_map(map),
        [
            (2, "src/".to_string()),
            (3, "src/main.rs".to_string()),
            (4, "src/dataplane/".to_string()),
            (5, "src/dataplane/gone.rs".to_string())
        ]
    );
    let table = PartsTable {
        modes: MODES.map(String::from).to_vec(),
        cells: vec![
            (1, "ipvs".into(), "`apply.rs` (`IpvsDataplane`)".into()),
            (2, "ebpf".into(), "`plan/` (`NoSuchType`), `gone.rs`".into()),
        ],
    };
    let problems = check_parts_table(&root, &tree, "t", &table);
    assert_eq!(
        problems,
        [
            "t:2: ebpf: `NoSuchType` is not in src/dataplane/ebpf/",
            "t:2: ebpf: src/dataplane/ebpf/gone.rs does not exist"
        ]
    );
}
