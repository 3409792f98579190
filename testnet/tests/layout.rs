//! The architecture, checked from the source: no import circle between the files of any crate, and the
//! sans-IO cores (protocol, sampling, the node's engine and algorithms) never name an async runtime, the
//! network stack, a clock or an unseeded RNG. Clippy's `disallowed-methods` (clippy.toml) catches clock and
//! RNG calls by path; this test also catches imports and dependencies.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: [&str; 5] = ["protocol", "sampling", "models", "node", "testnet"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file before its first `#[cfg(test)]` (a file's tests may import its parent), comment
/// lines dropped.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module path of a file under `src`: `lib.rs`/`main.rs` → [], `a.rs`/`a/mod.rs` → [a], `a/b.rs` → [a, b].
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem.to_string());
    }
    parts
}

/// Paths a piece of code names through `crate::` or `super::`, expanded over `{..}` groups, made absolute
/// (`super` resolved against `module`).
fn referenced_paths(code: &str, module: &[String], is_mod_file: bool) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", {
            // `super` of a/b.rs is a; of a/mod.rs (module a) it is the crate root's child list above a.
            let mut m = module.to_vec();
            if !is_mod_file || !m.is_empty() {
                m.pop();
            }
            m
        }),
    ] {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // e.g. `mycrate::`
            }
            for p in expand(rest) {
                let mut full = base.clone();
                full.extend(p);
                out.push(full);
            }
        }
    }
    out
}

/// Expands the path at the start of `s` (`a::b::C`, `a::{b, c::D}`) into its leaf paths.
fn expand(s: &str) -> Vec<Vec<String>> {
    let mut head = Vec::new();
    let mut rest = s;
    loop {
        let n = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if n == 0 {
            break;
        }
        head.push(rest[..n].to_string());
        rest = &rest[n..];
        if let Some(r) = rest.strip_prefix("::") {
            rest = r;
        } else {
            return vec![head];
        }
    }
    let Some(inner) = rest.strip_prefix('{') else {
        return vec![head];
    };
    // Split the group at top-level commas.
    let (mut depth, mut start, mut items) = (0, 0, Vec::new());
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&inner[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
        .into_iter()
        .flat_map(|it| expand(it.trim()))
        .map(|tail| head.iter().cloned().chain(tail).collect())
        .collect()
}

/// Import edges between the files of one crate: file → the file of the longest module prefix it names.
fn import_graph(krate: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = root().join(krate).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| {
            let name = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            (module_of(&src, f), name)
        })
        .collect();
    let mut graph = BTreeMap::new();
    for f in &files {
        let name = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        let module = module_of(&src, f);
        let is_mod = f.file_name().is_some_and(|n| n == "mod.rs");
        let mut targets = BTreeSet::new();
        for path in referenced_paths(&code(f), &module, is_mod) {
            let target = (0..=path.len())
                .rev()
                .find_map(|n| modules.get(&path[..n]))
                .expect("the crate root always matches");
            if *target != name {
                targets.insert(target.clone());
            }
        }
        graph.insert(name, targets);
    }
    graph
}

/// A cycle in `graph`, if any, as the files along it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if !state.contains_key(n.as_str())
            && let Some(c) = visit(n, graph, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_import_circle_between_files_of_any_crate() {
    for krate in CRATES {
        let graph = import_graph(krate);
        assert!(graph.len() > 3, "{krate}: source files found");
        if let Some(cycle) = find_cycle(&graph) {
            panic!("{krate}: import circle {}", cycle.join(" → "));
        }
    }
    // The graph is real: known edges are seen.
    let node = import_graph("node");
    assert!(
        node["sim.rs"].contains("engine/mod.rs"),
        "{:?}",
        node["sim.rs"]
    );
    assert!(
        node["engine/rn.rs"].contains("algo/mod.rs"),
        "{:?}",
        node["engine/rn.rs"]
    );
}

/// The VN role's rooms (`node/src/engine/vn/*.rs`) are driven by its dispatcher (`vn/mod.rs`) and never reach
/// back into it: each owns its state and decides from what it is given, and the dispatcher composes them (as
/// iroh-gossip's `Topic` composes its protocols). A room that needed the engine would be a second dispatcher.
#[test]
fn the_vn_rooms_do_not_reach_back_into_their_dispatcher() {
    let node = import_graph("node");
    let rooms: Vec<_> = node
        .iter()
        .filter(|(f, _)| {
            f.starts_with("engine/vn/") && *f != "engine/vn/mod.rs" && !f.starts_with("engine/vn/tests/")
        })
        .collect();
    assert!(rooms.len() >= 10, "the VN's rooms are found: {rooms:?}");
    for (room, imports) in rooms {
        assert!(
            !imports.contains("engine/vn/mod.rs"),
            "{room} imports the VN dispatcher: {imports:?}"
        );
    }
}

#[test]
fn the_cycle_finder_finds_a_circle() {
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a.rs", vec!["b.rs"]),
        ("b.rs", vec!["c/mod.rs"]),
        ("c/mod.rs", vec!["a.rs"]),
        ("d.rs", vec!["a.rs"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    let c = find_cycle(&g).unwrap();
    assert_eq!(c.first(), c.last());
    assert_eq!(c.len(), 4, "{c:?}");
    assert_eq!(
        expand("a::{b, c::{D, E}}; x"),
        vec![vec!["a", "b"], vec!["a", "c", "D"], vec!["a", "c", "E"]]
    );
}

const FORBIDDEN_IN_CORES: [&str; 6] = [
    "tokio",
    "libp2p",
    "Instant::now",
    "SystemTime::now",
    "thread_rng",
    "rand::rng(",
];

#[test]
fn the_cores_are_sans_io() {
    let r = root();
    let mut files = Vec::new();
    for dir in [
        "protocol/src",
        "sampling/src",
        "node/src/engine",
        "node/src/algo",
    ] {
        rust_files(&r.join(dir), &mut files);
    }
    assert!(files.len() >= 15, "{} core files", files.len());
    for f in &files {
        let code = code(f);
        for word in FORBIDDEN_IN_CORES {
            assert!(
                !code.contains(word),
                "{} names `{word}`: the cores take time and randomness as inputs",
                f.display()
            );
        }
    }
    for krate in ["protocol", "sampling", "models"] {
        let toml = std::fs::read_to_string(r.join(krate).join("Cargo.toml")).unwrap();
        let deps: String = toml
            .split("\n[")
            .filter(|s| s.starts_with("dependencies]"))
            .collect();
        for word in ["tokio", "libp2p"] {
            assert!(!deps.contains(word), "{krate} depends on {word}");
        }
    }
}
