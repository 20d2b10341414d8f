//! The whole engine call: a random token, content type, body and time against a
//! strategy built from the fuzzer's bytes when they load, else the demo strategy.
#![no_main]
use libfuzzer_sys::fuzz_target;
use strategy_webhook::Engine;

const DEMO: &[u8] = include_bytes!("../../examples/strategies/demo.json");
const DEMO_TOKEN: &[u8] = b"d4080c65a7ec92cae69c9e5e26b0bdc2bf10f18df4eee5217ef0d1eb5ec3874c";

fuzz_target!(|data: &[u8]| {
    // Layout: [selector][now: 8 bytes][content type selector][snapshot-len: 2][snapshot][body]
    if data.len() < 12 {
        return;
    }
    let selector = data[0];
    let now = i64::from_le_bytes(data[1..9].try_into().unwrap());
    let ct = match data[9] % 5 {
        0 => None,
        1 => Some("application/json"),
        2 => Some("text/plain"),
        3 => Some("application/x-www-form-urlencoded"),
        _ => Some("application/json; charset=utf-8"),
    };
    let snap_len = u16::from_le_bytes([data[10], data[11]]) as usize;
    let rest = &data[12..];
    let (snapshot, body) = rest.split_at(snap_len.min(rest.len()));
    let engine = Engine::new();
    let _ = engine.upsert_json(DEMO);
    let token: &[u8] = if selector & 1 == 0 { DEMO_TOKEN } else { body.get(..64).unwrap_or(body) };
    if let Ok(id) = engine.upsert_json(snapshot) {
        if let Some(s) = engine.strategy(&id) {
            let o = strategy_webhook::validate(&s, body, ct, now);
            assert!(serde_json_ok(&o.response));
        }
    }
    for i in 0..2 {
        let o = engine.deliver(token, body, ct, now.wrapping_add(i));
        assert!(serde_json_ok(&o.response), "{}", o.response);
        let _ = o.to_json();
    }
});

fn serde_json_ok(s: &str) -> bool {
    s.starts_with('{') && s.ends_with('}')
}
