//! Every relative link in the documentation resolves: the README, `docs/**/*.md` and `results/**/*.md` are
//! read from the workspace root, each markdown link `[text](target)` (and each reference definition
//! `[label]: target`) whose target is a path — not `http(s):`, `mailto:` or an `#anchor` of the same page — has
//! its `#fragment` cut off and must name a file or directory that exists, relative to the page (or to the
//! workspace root for a target starting with `/`). Code blocks and code spans are skipped: a path shown as code
//! is not a link. The failure lists every broken link with its page and line.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The markdown files under `dir`, depth first, in name order.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for p in paths {
        // npm's packages (results/live-view's browser check) are not our documentation, nor in git.
        if p.is_dir() && p.file_name().is_some_and(|n| n == "node_modules") {
            continue;
        }
        if p.is_dir() {
            markdown_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

/// `line` with its code spans (`` `...` ``, any number of backticks) blanked out.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].len() - rest[start..].trim_start_matches('`').len();
        let fence = &rest[start..start + ticks];
        let after = &rest[start + ticks..];
        match after.find(fence) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                // An unclosed backtick is literal text.
                out.push_str(fence);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The link targets of one line of prose: `](target)` and `[label]: target`.
fn targets(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        found.push(rest[..end].to_string());
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(i) = trimmed.find("]:")
    {
        found.push(trimmed[i + 2..].to_string());
    }
    found
        .into_iter()
        .filter_map(|t| {
            // `<path with spaces>` or `path "title"`.
            let t = t.trim();
            let t = match t.strip_prefix('<') {
                Some(inner) => inner.split('>').next().unwrap_or(""),
                None => t.split_whitespace().next().unwrap_or(""),
            };
            (!t.is_empty()).then(|| t.to_string())
        })
        .collect()
}

/// Whether a target leaves the repository or stays on the same page.
fn is_external_or_anchor(target: &str) -> bool {
    let lower = target.to_ascii_lowercase();
    target.starts_with('#')
        || lower.starts_with("http:")
        || lower.starts_with("https:")
        || lower.starts_with("mailto:")
}

/// `%20` and friends, as a markdown renderer would decode them.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit()
        {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every broken relative link of one page, as `page:line: target`.
fn broken_links(root: &Path, page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let dir = page.parent().unwrap();
    let shown = page
        .strip_prefix(root)
        .unwrap_or(page)
        .display()
        .to_string();
    let mut broken = Vec::new();
    let mut fence: Option<&str> = None;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if let Some(marker) = ["```", "~~~"].into_iter().find(|m| t.starts_with(m)) {
            // A fence opens a code block, and only the same kind of fence closes it.
            fence = match fence {
                None => Some(marker),
                Some(open) if open == marker => None,
                open => open,
            };
            continue;
        }
        if fence.is_some() {
            continue;
        }
        for target in targets(&without_code_spans(line)) {
            if is_external_or_anchor(&target) {
                continue;
            }
            let path = percent_decoded(target.split('#').next().unwrap());
            let resolved = match path.strip_prefix('/') {
                Some(from_root) => root.join(from_root),
                None => dir.join(&path),
            };
            if !resolved.exists() {
                broken.push(format!("{shown}:{}: {target}", n + 1));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_documentation_resolves() {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    markdown_files(&root.join("docs"), &mut pages);
    markdown_files(&root.join("results"), &mut pages);
    assert!(
        pages.len() > 2,
        "expected the README, docs/ and results/ pages, found {pages:?}"
    );
    let broken: Vec<String> = pages.iter().flat_map(|p| broken_links(&root, p)).collect();
    assert!(
        broken.is_empty(),
        "{} broken relative link(s) in the documentation (page:line: target):\n  {}",
        broken.len(),
        broken.join("\n  ")
    );
}

#[test]
fn the_link_reader_finds_what_a_renderer_would_link() {
    assert_eq!(
        targets("see [a](docs/a.md#x) and [b](<my file.md>) or [c](c.md \"title\")"),
        ["docs/a.md#x", "my file.md", "c.md"]
    );
    assert_eq!(
        targets("[ref]: ../results/README.md"),
        ["../results/README.md"]
    );
    assert!(targets(&without_code_spans("a `[x](not-a-link.md)` b")).is_empty());
    assert!(is_external_or_anchor("https://example.org"));
    assert!(is_external_or_anchor("#section"));
    assert!(!is_external_or_anchor("docs/protocol.md#timing"));
    assert_eq!(percent_decoded("a%20b.md"), "a b.md");
}
