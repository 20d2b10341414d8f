//! Plain-text specifics beyond the shared corpus check in `tests/corpus.rs` (which runs
//! `tests/corpus/text.jsonl` with the JSON bodies): unique case names, non-UTF-8 bytes,
//! and hostile bodies at the size limit.

use serde_json::Value;
use strategy_webhook::alert::{self, ParseError};

fn corpus() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/text.jsonl");
    let text = std::fs::read_to_string(path).expect("the corpus is readable");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {}: {e}", i + 1)))
        .collect()
}

#[test]
fn names_are_unique() {
    let cases = corpus();
    let mut names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap_or("")).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(before, names.len(), "duplicate case names");
}

#[test]
fn bytes_that_are_not_utf8_are_refused() {
    let e = alert::parse(b"buy long \xff\xfeAAPL", Some("text/plain")).unwrap_err();
    assert_eq!(e, ParseError::NotText);
}

/// Bodies at the 256 KiB limit, built to make a parser work hard: each must be answered, never a panic. Their
/// time is measured where speed is, in `benches/hostile.rs` (the `hostile_parse` group runs every one of these
/// shapes at the limit, `hostile_scaling` the ones that once took quadratic time at three sizes).
#[test]
fn hostile_bodies_at_the_size_limit_are_answered() {
    const SIZE: usize = 256 * 1024;
    let fill = |unit: &str| unit.repeat(SIZE / unit.len());
    let bodies = [
        fill("buy "),
        fill("AAPL "),
        fill("a"),
        fill("{"),
        fill("["),
        fill("\""),
        fill("“"),
        fill("{{"),
        fill(": order buy @ 1 filled on X. "),
        format!("{}order buy @ 1 filled on AAPL. New strategy position is 1", fill(": ")),
        format!("x: order buy @ 1 filled on {}. New strategy position is 1", fill("A")),
        fill("ticker=AAPL;"),
        fill("k=v "),
        fill("k: "),
        fill("\\n"),
        format!("{{\"ticker\":\"AAPL\",\"action\":\"buy\",\"x\":{}", fill("[")),
        format!("{{\"a\":{}}}", fill("{\"a\":")),
        format!("ticker={}", fill("x ")),
        fill("@ 1 "),
        format!("buy AAPL {}", fill("2024-01-15T14:30:00Z ")),
        format!("buy AAPL {}", fill("[10:30:00] ")),
        fill("🚀"),
    ];
    for body in &bodies {
        assert!(body.len() <= SIZE + 100);
        // None of these is an alert: the text pre-scan or the grammar refuses each with a reason a sender can act
        // on, rather than a bare "invalid" or a panic.
        let err = alert::parse(body.as_bytes(), Some("text/plain"))
            .expect_err(&format!("{}… is not an alert", body.chars().take(40).collect::<String>()));
        assert!(!err.to_string().is_empty());
    }
}

/// A time is tried after every `-` of TV-Hub's `alertTimestamp` (`AAPL-1705329000`): each try read the rest of the
/// text, and a body of dashes took seconds (a time key's value, JSON or text alike). The time is measured in
/// `benches/hostile.rs` (`hostile_scaling/alert_timestamp_dashes` at 16, 64 and 256 KiB); here, that such a value is
/// answered as the alert it is, with no time read from it.
#[test]
fn a_long_alert_timestamp_of_dashes_reads_as_no_time() {
    for unit in ["-", "-1", "-."] {
        let value = unit.repeat(250 * 1024 / unit.len());
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","alertTimestamp":"{value}"}}"#);
        let alerts = alert::parse(body.as_bytes(), Some("application/json")).expect("an alert");
        assert_eq!(alerts[0].instrument.as_str(), "AAPL", "{unit:?}");
        assert_eq!(alerts[0].sent_at_ms, None, "{unit:?}: no time in a run of dashes");
    }
}

#[test]
fn unclosed_brackets_cost_linear_work() {
    // Found by the parse_text fuzz target: a JSON-looking body whose value opens many `[`
    // and never closes them was explored both as an array and as a bare word at every
    // level, doubling the work per bracket until pest's call limit stopped it ("too
    // complex"). Each level is now read one way only, so the body is simply refused.
    // (Thousands of levels still meet pest's nesting guard, a clean "too complex".)
    for depth in [20, 100, 400] {
        let body = format!("{{\"t\":{{\r\n \"tr\": AC;a:{}a\\n;ion=", "[[;".repeat(depth));
        let err = alert::parse(body.as_bytes(), Some("text/plain")).unwrap_err().to_string();
        assert!(!err.contains("too complex"), "depth {depth}: {err}");
        assert!(err.contains("could not be read"), "depth {depth}: {err}");
    }
}
