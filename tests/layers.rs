//! The core's modules form floors, and each imports only from the floors below it: data
//! flows bytes → parse (alert) → decide → build → format (broker) → outcome, the engine on
//! top and the C ABI above the engine. This test reads `src/**/*.rs`, collects every
//! `crate::x` a top-level module names (imports, paths, macros; comments left out), and
//! holds the graph to the declared floors, which also rules out any circle. It also checks
//! that no string literal outside `src/broker/` names a broker, and that the reference
//! server (`examples/server/src/`) names none in its code or strings: what a broker's
//! answer means is asked of the `Broker` trait.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors, lowest first. A module may name modules of lower floors only.
const FLOORS: &[&[&str]] = &[
    // SHA-256 of short inputs and lowercase hex: what dedup keys and client order ids are made of.
    &["digest"],
    &["decimal", "state"],
    &["model"],
    &["alert", "broker"],
    &["strategy"],
    &["decide"],
    &["builder"],
    &["outcome"],
    &["engine"],
    &["ffi"],
];

const BROKER_NAMES: [&str; 5] = ["alpaca", "tradier", "schwab", "tastytrade", "coinbase"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/builder/price.rs` → `build`), `None` for lib.rs.
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_string())
}

/// The source with comments removed and string and char literals blanked, plus the string
/// literals themselves. Small, but enough for this crate: raw strings, escapes, lifetimes.
fn lex(text: &str) -> (String, Vec<String>) {
    let b = text.as_bytes();
    let (mut code, mut strings) = (String::with_capacity(text.len()), Vec::new());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                i = end;
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#')) && (i == 0 || !is_ident(b[i - 1])) => {
                let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    code.push('r');
                    i += 1;
                    continue;
                }
                let start = i + 2 + hashes;
                let close = format!("\"{}", "#".repeat(hashes));
                let end = text[start..].find(&close).map_or(b.len(), |e| start + e);
                strings.push(text[start..end].to_string());
                code.push_str("\"\"");
                i = (end + close.len()).min(b.len());
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                strings.push(text[i + 1..j.min(b.len())].to_string());
                code.push_str("\"\"");
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '"') or a lifetime ('a).
                if b.get(i + 1) == Some(&b'\\') {
                    let end = text[i + 2..].find('\'').map_or(b.len(), |e| i + 2 + e + 1);
                    i = end;
                } else if let Some(c) = text[i + 1..].chars().next() {
                    if text[i + 1 + c.len_utf8()..].starts_with('\'') {
                        i += 2 + c.len_utf8();
                    } else {
                        code.push('\'');
                        i += 1;
                    }
                } else {
                    i += 1;
                }
            }
            _ => {
                let c = text[i..].chars().next().unwrap_or(' ');
                code.push(c);
                i += c.len_utf8();
            }
        }
    }
    (code, strings)
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The top-level modules named as `crate::x` (and `crate::{x, y::…}`) in code.
fn references(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].bytes().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| is_ident(c) && c != b'$') {
            continue; // `my_crate::`, not this crate
        }
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && name != "self" {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let Some(module) = module_of(&f) else { continue };
        let (code, _) = lex(&std::fs::read_to_string(&f).expect("source is readable"));
        let refs = graph.entry(module.clone()).or_default();
        refs.extend(references(&code).into_iter().filter(|r| *r != module));
    }
    graph
}

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&module))
}

#[test]
fn every_import_runs_down() {
    let graph = graph();
    assert!(graph.len() >= 10, "the source tree was read: {graph:?}");
    let mut wrong = Vec::new();
    for (module, refs) in &graph {
        let Some(floor) = floor_of(module) else {
            wrong.push(format!("{module} is on no floor: add it to FLOORS"));
            continue;
        };
        for r in refs {
            match floor_of(r) {
                Some(f) if f < floor => {}
                Some(f) => wrong.push(format!("{module} (floor {floor}) names {r} (floor {f})")),
                None => wrong.push(format!("{module} names {r}, which is on no floor")),
            }
        }
    }
    assert!(wrong.is_empty(), "imports that run up or sideways:\n{}", wrong.join("\n"));
}

#[test]
fn the_module_graph_has_no_circle() {
    // Implied by the floors, and checked on its own so a wrong FLOORS cannot hide one.
    let graph = graph();
    let mut done = BTreeSet::new();
    fn visit<'a>(
        g: &'a BTreeMap<String, BTreeSet<String>>,
        m: &'a str,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if let Some(i) = path.iter().position(|p| *p == m) {
            panic!("import circle: {} -> {m}", path[i..].join(" -> "));
        }
        if !done.insert(m) {
            return;
        }
        path.push(m);
        for r in g.get(m).into_iter().flatten() {
            visit(g, r, path, done);
        }
        path.pop();
    }
    for m in graph.keys() {
        visit(&graph, m, &mut Vec::new(), &mut done);
    }
}

#[test]
fn no_broker_name_outside_the_broker_module() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let broker_dir = src().join("broker");
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(&broker_dir)) {
        let (_, strings) = lex(&std::fs::read_to_string(f).expect("source is readable"));
        for s in strings {
            let lower = s.to_lowercase();
            if let Some(name) = BROKER_NAMES.iter().find(|n| lower.contains(*n)) {
                found.push(format!("{}: {name} in {s:?}", f.display()));
            }
        }
    }
    assert!(files.len() > 20, "the source tree was read");
    assert!(found.is_empty(), "broker names outside src/broker/:\n{}", found.join("\n"));
}

#[test]
fn the_server_names_no_broker() {
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/server/src");
    let mut files = Vec::new();
    rust_files(&server, &mut files);
    let mut found = Vec::new();
    for f in &files {
        let (code, strings) = lex(&std::fs::read_to_string(f).expect("source is readable"));
        // Code too (a `BrokerId::Alpaca` match is a broker name); comments are left out by `lex`.
        for text in strings.iter().chain(std::iter::once(&code)) {
            let lower = text.to_lowercase();
            for name in BROKER_NAMES.iter().filter(|n| lower.contains(*n)) {
                let at = lower.find(name).unwrap_or(0);
                let around: String = text.chars().skip(at.saturating_sub(30)).take(80).collect();
                found.push(format!("{}: {name} in {around:?}", f.display()));
            }
        }
    }
    assert!(files.len() > 10, "the server's source tree was read: {files:?}");
    assert!(found.is_empty(), "broker names in the server:\n{}", found.join("\n"));
}

#[test]
fn the_reader_sees_what_it_must() {
    let sample = r####"
        use crate::{alert::Alert, model};
        use crate::decimal::Decimal; // crate::engine in a comment
        /* crate::ffi */
        let s = "crate::outcome and Alpaca";
        let r = r#"coinbase "quoted""#;
        let c = '"'; let l: &'a str = x; let e = '\'';
        other_crate::thing(); $crate::model::words::X;
        fn f() { crate::strategy::Strategy::from_json(b); }
    "####;
    let (code, strings) = lex(sample);
    let refs = references(&code);
    let want: BTreeSet<String> = ["alert", "model", "decimal", "strategy"].iter().map(|s| s.to_string()).collect();
    assert_eq!(refs, want);
    assert!(strings.iter().any(|s| s.contains("Alpaca")), "{strings:?}");
    assert!(strings.iter().any(|s| s.contains("coinbase \"quoted\"")), "{strings:?}");
}
