//! The house rules of the code's layout (docs/architecture.md), checked on the source:
//! no import circles between the files of a crate (arrows run one way), the API server's
//! layer imports no resource, and no file's code (before its tests) runs past 800 lines.
//! A file's tests (everything after its first `#[cfg(test)]`, `tests.rs`, `testing.rs`)
//! are left out, as they may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use terrace_tests::workspace_root;

/// The longest a file's code may run before it is split along its seams.
const MAX_LINES: usize = 800;

/// The code of each module of the crate under `src`, by module path (`a::b`; the crate
/// root is ``), with comments and tests cut off.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            if parts == ["lib"] || parts == ["main"] {
                parts.clear();
            }
            if parts.iter().any(|p| {
                p == "tests" || p == "testing" || p.ends_with("_tests") && p != "module_tests"
            }) {
                continue;
            }
            out.insert(parts.join("::"), code_of(&path));
        }
    }
    out
}

/// A file's code: up to its first `#[cfg(test)]`, without `//` comments.
fn code_of(path: &PathBuf) -> String {
    let text = std::fs::read_to_string(path).expect("a source file");
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a module's code names from `crate::` or `super::`, brace groups expanded
/// one level, as segments resolved against the module `at`.
fn named_paths(at: &str, code: &str) -> Vec<Vec<String>> {
    let here: Vec<String> = if at.is_empty() {
        vec![]
    } else {
        at.split("::").map(str::to_owned).collect()
    };
    let mut out = Vec::new();
    for start in ["crate::", "super::"] {
        let mut rest = code;
        while let Some(i) = rest.find(start) {
            let before = rest[..i].chars().last();
            let after = &rest[i + start.len()..];
            rest = after;
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut base: Vec<String> = if start == "crate::" {
                vec![]
            } else {
                here[..here.len().saturating_sub(1)].to_vec()
            };
            let mut tail = after;
            // `super::super::…`
            while let Some(t) = tail.strip_prefix("super::") {
                base.pop();
                tail = t;
            }
            let head: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut path = base.clone();
            path.extend(
                head.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            );
            let after_head = &tail[head.len()..];
            if (head.is_empty() || head.ends_with("::")) && after_head.starts_with('{') {
                let group = &after_head[1..after_head.find('}').unwrap_or(after_head.len())];
                for item in group.split(',') {
                    let mut p = path.clone();
                    p.extend(
                        item.split("::")
                            .map(str::trim)
                            .filter(|s| !s.is_empty() && *s != "self" && !s.contains('{'))
                            .map(str::to_owned),
                    );
                    out.push(p);
                }
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// The edges between the modules of `src`: `a` → `b` when `a`'s code names `b` (not its
/// own parent).
fn graph(src: &Path) -> (BTreeMap<String, String>, BTreeMap<String, BTreeSet<String>>) {
    let mods = modules(src);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, code) in &mods {
        let e = edges.entry(m.clone()).or_default();
        for path in named_paths(m, code) {
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|c| mods.contains_key(c));
            if let Some(t) = target
                && &t != m
                && !m.starts_with(&format!("{t}::"))
            {
                e.insert(t);
            }
        }
    }
    (mods, edges)
}

/// The import circles of a graph (strongly connected components of two or more).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Reachability is enough at this size: a and b are in one circle when each reaches
    // the other.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(n) = todo.pop() {
            for t in edges.get(&n).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|k| (k, reach(k))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut placed = BTreeSet::new();
    for (a, ra) in &reaches {
        if placed.contains(*a) || !ra.contains(*a) {
            continue;
        }
        let circle: Vec<String> = ra
            .iter()
            .filter(|b| reaches.get(b).is_some_and(|rb| rb.contains(*a)))
            .cloned()
            .collect();
        placed.extend(circle.iter().cloned());
        out.push(circle);
    }
    out
}

const CRATES: [&str; 5] = ["crds", "operator", "api-server", "simulator", "terrace"];

#[test]
fn arrows_run_one_way_in_every_crate() {
    let mut found = Vec::new();
    for krate in CRATES {
        let (_, edges) = graph(&workspace_root().join(krate).join("src"));
        for c in circles(&edges) {
            let shown: Vec<String> = c
                .iter()
                .map(|m| {
                    let to: Vec<&String> = edges[m].iter().filter(|t| c.contains(t)).collect();
                    format!("{m} -> {to:?}")
                })
                .collect();
            found.push(format!("{krate}: {}", shown.join("; ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_api_servers_layer_imports_no_resource() {
    let (_, edges) = graph(&workspace_root().join("api-server/src"));
    let wrong: Vec<String> = edges
        .iter()
        .filter(|(m, _)| !m.starts_with("resources") && !m.starts_with("ui") && !m.is_empty())
        .flat_map(|(m, to)| {
            to.iter()
                .filter(|t| t.starts_with("resources::"))
                .map(move |t| format!("{m} -> {t}"))
        })
        .collect();
    assert!(wrong.is_empty(), "the layer imports resources: {wrong:?}");
}

#[test]
fn no_files_code_runs_past_800_lines() {
    let mut long = Vec::new();
    for krate in CRATES {
        let src = workspace_root().join(krate).join("src");
        let mut stack = vec![src];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("a source folder") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default();
                if !name.ends_with(".rs") || name == "tests.rs" || name == "testing.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("a source file");
                let lines = text
                    .split("#[cfg(test)]")
                    .next()
                    .unwrap_or_default()
                    .lines()
                    .count();
                if lines > MAX_LINES {
                    long.push(format!("{} ({lines})", path.display()));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these along their seams (at most {MAX_LINES} lines of code before the tests): {long:?}"
    );
}

/// The checks themselves find what they look for.
#[test]
fn a_circle_and_a_long_file_are_found() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::thing;\n").unwrap();
    std::fs::write(src.join("b.rs"), "use crate::{a, c};\n// crate::z\n").unwrap();
    let (_, edges) = graph(src);
    assert_eq!(circles(&edges), vec![vec!["a".to_owned(), "b".to_owned()]]);
    std::fs::write(src.join("b.rs"), "fn f() {}\n").unwrap();
    let (_, edges) = graph(src);
    assert!(circles(&edges).is_empty());
}
