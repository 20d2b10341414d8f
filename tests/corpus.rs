//! Every body in `tests/corpus/*.jsonl` with its expected canonical alerts or reason.
//!
//! A line is `{"name", "content_type", "body", "expect": {"alerts": [...]} | {"error": "..."}}`.
//! Expected prices written as `"RAW:190.10"` must come out with exactly those digits.

use serde_json::Value;
use strategy_webhook::alert;

fn check(file: &str, line: &str) -> Result<(), String> {
    let case: Value = serde_json::from_str(line).map_err(|e| format!("{file}: bad corpus line: {e}"))?;
    let name = case["name"].as_str().unwrap_or("?");
    let body = case["body"].as_str().ok_or(format!("{name}: no body"))?;
    let ct = case["content_type"].as_str();
    let got = alert::parse(body.as_bytes(), ct);
    match (&case["expect"]["alerts"], &case["expect"]["error"], got) {
        (Value::Array(want), _, Ok(alerts)) => {
            let got: Vec<String> = alerts.iter().map(|a| a.to_json()).collect();
            // A canonical alert renders to JSON that parses back to itself (what the parse_json fuzz target
            // asserts on every input; the corpus seeds it).
            for (a, json) in alerts.iter().zip(&got) {
                let again = alert::parse(json.as_bytes(), Some("application/json"));
                if again.as_deref() != Ok(std::slice::from_ref(a)) {
                    return Err(format!("{name}: {json} parses back as {again:?}, not {a:?}"));
                }
            }
            if got.len() != want.len() {
                return Err(format!("{name}: {} alerts, expected {}: {got:?}", got.len(), want.len()));
            }
            for (g, w) in got.iter().zip(want) {
                let mut w = w.clone();
                // Exact digits: compare the price token as text when the corpus says RAW.
                if let Some(raw) = w["price"].as_str().and_then(|s| s.strip_prefix("RAW:")) {
                    if !g.contains(&format!("\"price\":{raw},")) && !g.ends_with(&format!("\"price\":{raw}}}")) {
                        return Err(format!("{name}: price digits differ: {g}"));
                    }
                    w["price"] = serde_json::from_str(raw).unwrap();
                }
                let g: Value = serde_json::from_str(g).unwrap();
                if g != w {
                    return Err(format!("{name}:\n  got  {g}\n  want {w}"));
                }
            }
            Ok(())
        }
        (_, Value::String(want), Err(e)) => {
            let msg = e.to_string();
            if msg.contains(want.as_str()) {
                Ok(())
            } else {
                Err(format!("{name}: error {msg:?} does not contain {want:?}"))
            }
        }
        (_, _, Ok(a)) => {
            Err(format!("{name}: expected an error, got {:?}", a.iter().map(|a| a.to_json()).collect::<Vec<_>>()))
        }
        (_, _, Err(e)) => Err(format!("{name}: expected alerts, got error {e}")),
    }
}

#[test]
fn corpus() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");
    let mut failures = Vec::new();
    let mut count = 0;
    for entry in std::fs::read_dir(dir).expect("tests/corpus exists") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            count += 1;
            if let Err(e) = check(&path.display().to_string(), line) {
                failures.push(e);
            }
        }
    }
    assert!(count >= 60, "the corpus holds {count} bodies; the issue asks for at least 60");
    assert!(failures.is_empty(), "{} of {count} corpus cases failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn binary_garbage_and_huge_bodies_are_refused_cleanly() {
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    for ct in [None, Some("application/json"), Some("text/plain")] {
        assert!(alert::parse(&garbage, ct).is_err());
    }
    let mut big = br#"{"ticker":"AAPL","action":"buy","pad":""#.to_vec();
    big.resize(256 * 1024 - 2, b'x');
    big.extend_from_slice(b"\"}");
    assert_eq!(big.len(), 256 * 1024);
    assert_eq!(alert::parse(&big, Some("application/json")).unwrap()[0].instrument, "AAPL");
}

/// The README's promise: a JSON-looking body sent as `text/plain` (a TradingView template whose content type the
/// platform chose, or text that failed as JSON) gives the same alert as JSON, or the same refusal. A 3Commas body's
/// `strategy_info` was read by the JSON path only: as text a partial exit closed the whole position and a
/// reversal lost its new side.
#[test]
fn every_json_body_of_the_corpus_reads_the_same_as_text() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");
    let mut compared = 0;
    let mut differ = Vec::new();
    for entry in std::fs::read_dir(dir).expect("tests/corpus exists") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines().filter(|l| !l.trim().is_empty()) {
            let case: Value = serde_json::from_str(line).unwrap();
            let body = case["body"].as_str().unwrap_or_default();
            // Bodies that are JSON objects and read as JSON: the text path must agree.
            if case["content_type"].as_str() != Some("application/json")
                || serde_json::from_str::<serde_json::Map<String, Value>>(body).is_err()
            {
                continue;
            }
            compared += 1;
            let json = alert::parse(body.as_bytes(), Some("application/json"));
            let text = alert::parse(body.as_bytes(), Some("text/plain"));
            let same = match (&json, &text) {
                (Ok(a), Ok(b)) => a == b,
                (Err(_), Err(_)) => true,
                _ => false,
            };
            if !same {
                differ.push(format!("{}:\n  json {json:?}\n  text {text:?}", case["name"]));
            }
        }
    }
    assert!(compared >= 40, "only {compared} JSON bodies compared");
    assert!(differ.is_empty(), "{} of {compared} differ:\n{}", differ.len(), differ.join("\n"));
}

/// The same promise where it decides the dedup key: the message id. Both readers take every spelling of the id
/// (`message_id`, `messageId`) and refuse two that differ; a number is the id only when whole, as its digits however
/// long (a fraction or an exponent has more than one spelling of one value, so it is refused); `strategy_info`'s
/// `legs` are legs. Each body is sent compact (the text reader's hand path) and one member a line (its grammar).
/// A body refused for its id has no id for the dedup key either: the raw body's hash is the key.
#[test]
fn a_json_body_sent_as_text_gets_the_same_alert_and_message_id() {
    let leg = r#"{"symbol":"SPY240119C00450000","action":"buy_to_open"}"#;
    let with_legs = format!(r#"{{"ticker":"SPY","action":"OPEN","strategy_info":{{"legs":[{leg}]}}}}"#);
    let cases: [(&str, Result<Option<&str>, ()>); 12] = [
        (r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"a","messageId":"b"}}"#, Err(())),
        (r#"{"ticker":"AAPL","action":"buy","metadata":{"messageId":"a","message_id":"a"}}"#, Ok(Some("a"))),
        (r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":1.5}}"#, Err(())),
        (r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":1e3}}"#, Err(())),
        (r#"{"ticker":"AAPL","action":"buy","metadata":{"messageId":42}}"#, Ok(Some("42"))),
        (
            r#"{"ticker":"AAPL","action":"buy","message_id":12345678901234567890123}"#,
            Ok(Some("12345678901234567890123")),
        ),
        (r#"{"ticker":"AAPL","action":"buy","message_id":-7}"#, Ok(Some("-7"))),
        (r#"{"ticker":"AAPL","action":"buy","message_id":7.0}"#, Err(())),
        (r#"{"ticker":"AAPL","action":"buy","message_id":"1.5"}"#, Ok(Some("1.5"))),
        (r#"{"ticker":"AAPL","action":"buy","message_id":"x","metadata":{"messageId":"y"}}"#, Err(())),
        (r#"{"ticker":"AAPL","action":"buy","strategy_info":{"legs":[]}}"#, Ok(None)),
        (&with_legs, Ok(None)),
    ];
    for (body, want) in cases {
        let json = alert::parse(body.as_bytes(), Some("application/json"));
        assert_eq!(json.as_ref().map(|a| a[0].message_id.as_deref()).map_err(drop), want, "{body}");
        for sent in [body.to_owned(), body.replace(',', ",\n")] {
            let text = alert::parse(sent.as_bytes(), Some("text/plain"));
            assert_eq!(text, json, "{sent}");
        }
        if json.is_err() {
            assert_eq!(alert::message_id_of_unparsed(body.as_bytes()), None, "{body}");
        }
    }
    let a = alert::parse(with_legs.as_bytes(), Some("application/json")).unwrap();
    assert_eq!(a[0].legs.len(), 1, "{:?}", a[0]);
}
