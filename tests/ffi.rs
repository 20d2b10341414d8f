//! The C ABI called directly from Rust, so `cargo test` covers its error paths too:
//! NULL arguments, length mismatches, invalid UTF-8, malformed snapshots, invalid
//! tokens, wrong-type handles, use after free, double free and free(NULL).
#![cfg(feature = "ffi")]

use std::ffi::c_char;
use std::ptr::{null, null_mut};
use std::sync::Mutex;
use strategy_webhook::ffi::swh_result::{self, *};
use strategy_webhook::ffi::*;
use strategy_webhook::{Engine, Strategy};

const TOKEN: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const TOKEN2: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const TOKEN3: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
const JSON: &str = "application/json";
const T0: i64 = 1_705_676_400_000;
/// Rejected by every test strategy before order formatting.
const REJECTED: &str = r#"{"ticker":"TSLA","action":"buy"}"#;

/// Freed addresses can be handed out again to a new handle (the header says so), so
/// tests that check a freed handle must not run beside tests that allocate handles.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn snapshot(id: &str, token: &str, status: &str) -> String {
    serde_json::json!({
        "id": id, "token_hash": token, "status": status, "asset_class": "equity",
        "allowed_instruments": ["AAPL"], "directions": {"long": true, "short": false},
        "rules": {"buy": "open_long", "sell": "close_long"},
        "bots": [{"id": "b1", "broker": "alpaca", "account_id": "PA0", "sizing": {"fixed_quantity": "1"}}]
    })
    .to_string()
}

fn last_error() -> String {
    let (mut p, mut n) = (null(), 0);
    assert_eq!(unsafe { swh_last_error_message(&mut p, &mut n) }, SWH_OK);
    let s = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
    assert_eq!(unsafe { *p.add(n) }, 0, "NUL-terminated");
    String::from_utf8(s.to_vec()).unwrap()
}

/// Asserts a failure code and that it left a message.
#[track_caller]
fn fails(r: swh_result, code: swh_result) -> String {
    assert_eq!(r, code, "{}", last_error());
    let m = last_error();
    assert!(!m.is_empty(), "a failure leaves a message");
    m
}

fn text(p: *const c_char, n: usize) -> String {
    let s = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
    assert_eq!(unsafe { *p.add(n) }, 0, "NUL-terminated");
    String::from_utf8(s.to_vec()).unwrap()
}

fn new_engine() -> *mut swh_engine {
    let mut e = null_mut();
    assert_eq!(unsafe { swh_engine_new(&mut e) }, SWH_OK);
    assert!(!e.is_null());
    e
}

fn upsert(e: *const swh_engine, s: &str) -> swh_result {
    unsafe { swh_engine_upsert(e, s.as_ptr(), s.len()) }
}

fn deliver(e: *const swh_engine, token: &str, body: &str, now: i64) -> Result<*mut swh_outcome, swh_result> {
    let mut o = null_mut();
    let r = unsafe {
        swh_engine_deliver(
            e,
            token.as_ptr(),
            token.len(),
            body.as_ptr(),
            body.len(),
            JSON.as_ptr().cast(),
            JSON.len(),
            now,
            &mut o,
        )
    };
    if r == SWH_OK {
        Ok(o)
    } else {
        assert!(o.is_null(), "out-parameter written on failure");
        Err(r)
    }
}

/// Status, body and JSON of an outcome, checked against one another; frees it.
fn read(o: *mut swh_outcome) -> (u16, String, serde_json::Value) {
    let mut status = 0;
    let (mut b, mut bn, mut j, mut jn) = (null(), 0, null(), 0);
    unsafe {
        assert_eq!(swh_outcome_http_status(o, &mut status), SWH_OK);
        assert_eq!(swh_outcome_response(o, &mut b, &mut bn), SWH_OK);
        assert_eq!(swh_outcome_json(o, &mut j, &mut jn), SWH_OK);
    }
    let (body, json) = (text(b, bn), text(j, jn));
    assert_eq!(unsafe { swh_outcome_free(o) }, SWH_OK);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["http_status"], status);
    assert_eq!(v["response"], serde_json::from_str::<serde_json::Value>(&body).unwrap());
    (status, body, v)
}

fn post(e: *const swh_engine, token: &str, body: &str, now: i64) -> (u16, String) {
    let (s, b, _) = read(deliver(e, token, body, now).unwrap());
    (s, b)
}

#[test]
fn version_and_last_error() {
    let _g = serial();
    let (mut p, mut n) = (null(), 0);
    assert_eq!(unsafe { swh_version(&mut p, &mut n) }, SWH_OK);
    assert_eq!(text(p, n), env!("CARGO_PKG_VERSION"));
    assert_eq!(last_error(), "");
    assert!(fails(unsafe { swh_version(null_mut(), &mut n) }, SWH_NULL_ARGUMENT).contains("out_version"));
    fails(unsafe { swh_version(&mut p, null_mut()) }, SWH_NULL_ARGUMENT);
    // Reading the message keeps it; the next call clears it.
    assert!(!last_error().is_empty());
    assert_eq!(unsafe { swh_version(&mut p, &mut n) }, SWH_OK);
    assert_eq!(last_error(), "");
    assert_eq!(unsafe { swh_last_error_message(null_mut(), &mut n) }, SWH_NULL_ARGUMENT);
    assert_eq!(unsafe { swh_last_error_message(&mut p, null_mut()) }, SWH_NULL_ARGUMENT);
    fails(unsafe { swh_engine_new(null_mut()) }, SWH_NULL_ARGUMENT);
    // A NULL argument to the reader leaves the message, and the text handed out before, as they were: replaced, the
    // text a host was still printing was freed under it.
    let (mut m, mut len) = (null(), 0);
    assert_eq!(unsafe { swh_last_error_message(&mut m, &mut len) }, SWH_OK);
    let before = text(m, len);
    assert_eq!(unsafe { swh_last_error_message(&mut p, null_mut()) }, SWH_NULL_ARGUMENT);
    assert_eq!(unsafe { swh_last_error_message(null_mut(), null_mut()) }, SWH_NULL_ARGUMENT);
    assert_eq!(text(m, len), before, "the text handed out is still there");
    assert_eq!(last_error(), before);
}

/// A C host reads the Outcome's JSON by the header's description: a field it does not name is one the host cannot
/// know to act on. Left out, `after` let a host send a reversal's new side when its close had failed.
#[test]
fn the_header_names_every_field_of_the_outcome() {
    let _g = serial();
    let snap = serde_json::json!({"id": "s1", "token_hash": TOKEN, "status": "active", "asset_class": "equity",
        "allowed_instruments": ["AAPL"], "directions": {"long": true, "short": true},
        "rules": {"buy": "open_long", "sell": "close_long"},
        "bots": [{"id": "b1", "broker": "alpaca", "account_id": "PA0", "sizing": {"fixed_quantity": "1"},
                  "positions": [{"instrument": "AAPL", "direction": "long", "quantity": "5"}],
                  "working_orders": [{"id": "w1", "instrument": "AAPL", "direction": "short", "intent": "entry",
                                      "order_type": "limit", "price": "200", "quantity": "1", "state": "open"}]}]});
    let e = new_engine();
    assert_eq!(upsert(e, &snap.to_string()), SWH_OK);
    let reversal = r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"long","marketPosition":"short"}"#;
    let modify = r#"{"ticker":"AAPL","action":"MODIFY","direction":"SHORT","price":201}"#;
    let mut top = std::collections::BTreeSet::new();
    let mut order = std::collections::BTreeSet::new();
    for (i, body) in [reversal, modify].into_iter().enumerate() {
        let (status, _, v) = read(deliver(e, TOKEN, body, T0 + i as i64).unwrap());
        assert_eq!(status, 200, "{v}");
        top.extend(v.as_object().unwrap().keys().cloned());
        for o in v["orders"].as_array().unwrap() {
            order.extend(o.as_object().unwrap().keys().cloned());
        }
    }
    assert_eq!(unsafe { swh_engine_free(e) }, SWH_OK);
    assert!(order.contains("after") && order.contains("keeps_order_id"), "a reversal and a replace: {order:?}");
    let header = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/strategy_webhook.h")).unwrap();
    let missing: Vec<&String> = top.iter().chain(&order).filter(|k| !header.contains(&format!("`{k}`"))).collect();
    assert!(missing.is_empty(), "the header does not name {missing:?}");
}

#[test]
fn abi_version_and_limits_match_the_library_and_the_header() {
    let _g = serial();
    fails(unsafe { swh_engine_new(null_mut()) }, SWH_NULL_ARGUMENT);
    assert_eq!(swh_abi_version(), SWH_ABI_VERSION);
    // It leaves the last error alone.
    assert!(last_error().contains("out_engine"));
    assert_eq!(SWH_MAX_BODY, strategy_webhook::MAX_BODY);
    assert_eq!(SWH_MAX_LEGS, strategy_webhook::alert::MAX_LEGS);
    // The checked-in header gives C hosts the same numbers.
    let header = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/strategy_webhook.h")).unwrap();
    for (name, value) in
        [("SWH_ABI_VERSION", SWH_ABI_VERSION as usize), ("SWH_MAX_BODY", SWH_MAX_BODY), ("SWH_MAX_LEGS", SWH_MAX_LEGS)]
    {
        let line = format!("#define {name} {value}\n");
        assert!(header.contains(&line), "the header lacks {line:?}");
    }
}

#[test]
fn the_last_error_is_per_thread() {
    let _g = serial();
    fails(unsafe { swh_engine_new(null_mut()) }, SWH_NULL_ARGUMENT);
    std::thread::spawn(|| assert_eq!(last_error(), "")).join().unwrap();
    assert!(last_error().contains("out_engine"));
}

#[test]
fn upsert_errors() {
    let _g = serial();
    let e = new_engine();
    assert_eq!(upsert(e, &snapshot("s1", TOKEN, "active")), SWH_OK);
    assert_eq!(upsert(e, &snapshot("s1", TOKEN, "paused")), SWH_OK);
    assert!(fails(upsert(e, "{not json"), SWH_INVALID_SNAPSHOT).contains("invalid strategy snapshot"));
    fails(upsert(e, r#"{"id":"x"}"#), SWH_INVALID_SNAPSHOT);
    let mut bad = serde_json::from_str::<serde_json::Value>(&snapshot("s9", TOKEN3, "active")).unwrap();
    bad["allowed_instruments"] = serde_json::json!([]);
    assert!(fails(upsert(e, &bad.to_string()), SWH_INVALID_SNAPSHOT).contains("allowed_instruments"));
    assert!(fails(upsert(e, &snapshot("s2", TOKEN, "active")), SWH_TOKEN_IN_USE).contains("s1"));
    unsafe {
        fails(swh_engine_upsert(e, null(), 0), SWH_INVALID_SNAPSHOT);
        fails(swh_engine_upsert(e, null(), 3), SWH_INVALID_ARGUMENT);
        fails(swh_engine_upsert(e, b"{}".as_ptr(), usize::MAX), SWH_INVALID_ARGUMENT);
        fails(swh_engine_upsert(null(), b"{}".as_ptr(), 2), SWH_NULL_ARGUMENT);
        fails(swh_engine_upsert(e, b"\xff\xfe".as_ptr(), 2), SWH_INVALID_SNAPSHOT);
        assert_eq!(swh_engine_free(e), SWH_OK);
    }
}

#[test]
fn remove_and_rotate() {
    let _g = serial();
    let e = new_engine();
    assert_eq!(upsert(e, &snapshot("s1", TOKEN, "active")), SWH_OK);
    assert_eq!(upsert(e, &snapshot("s2", TOKEN2, "active")), SWH_OK);
    let id = |s: &'static str| (s.as_ptr().cast::<c_char>(), s.len());
    let (s1, s1n) = id("s1");
    unsafe {
        fails(swh_engine_rotate(e, s1, s1n, b"short".as_ptr(), 5), SWH_INVALID_TOKEN);
        fails(swh_engine_rotate(e, s1, s1n, TOKEN.to_uppercase().as_ptr(), 64), SWH_INVALID_TOKEN);
        fails(swh_engine_rotate(e, s1, s1n, TOKEN2.as_ptr(), 64), SWH_TOKEN_IN_USE);
        let (nope, nn) = id("nope");
        fails(swh_engine_rotate(e, nope, nn, TOKEN3.as_ptr(), 64), SWH_UNKNOWN_STRATEGY);
        fails(swh_engine_rotate(e, b"\xff".as_ptr().cast(), 1, TOKEN3.as_ptr(), 64), SWH_INVALID_UTF8);
        fails(swh_engine_rotate(e, null(), 2, TOKEN3.as_ptr(), 64), SWH_INVALID_ARGUMENT);
        fails(swh_engine_rotate(e, s1, s1n, null(), 64), SWH_INVALID_ARGUMENT);
        fails(swh_engine_rotate(null(), s1, s1n, TOKEN3.as_ptr(), 64), SWH_NULL_ARGUMENT);
        assert_eq!(swh_engine_rotate(e, s1, s1n, TOKEN3.as_ptr(), 64), SWH_OK);
    }
    assert_eq!(post(e, TOKEN, REJECTED, T0).0, 404);
    assert_eq!(post(e, TOKEN3, REJECTED, T0).0, 200);
    unsafe {
        fails(swh_engine_remove(e, b"\xc3\x28".as_ptr().cast(), 2), SWH_INVALID_UTF8);
        fails(swh_engine_remove(e, null(), 2), SWH_INVALID_ARGUMENT);
        fails(swh_engine_remove(e, null(), 0), SWH_UNKNOWN_STRATEGY);
        fails(swh_engine_remove(null(), s1, s1n), SWH_NULL_ARGUMENT);
        assert_eq!(swh_engine_remove(e, s1, s1n), SWH_OK);
        fails(swh_engine_remove(e, s1, s1n), SWH_UNKNOWN_STRATEGY);
    }
    assert_eq!(post(e, TOKEN3, REJECTED, T0).0, 404);
    assert_eq!(unsafe { swh_engine_free(e) }, SWH_OK);
}

/// A host that cannot make a processed outcome durable answers the sender with an error and gives the key
/// back: the retry trades instead of being answered `duplicate`. Before this call, a C host had no way to.
#[test]
fn a_host_gives_a_key_back_and_the_retry_trades() {
    let _g = serial();
    let e = new_engine();
    assert_eq!(upsert(e, &snapshot("s1", TOKEN, "active")), SWH_OK);
    let body = r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"m-7"}}"#;
    let (status, answer) = post(e, TOKEN, body, T0);
    assert_eq!((status, answer.as_str()), (200, r#"{"status":"processed"}"#));
    assert_eq!(post(e, TOKEN, body, T0 + 1_000).1, r#"{"status":"duplicate"}"#, "the key is held");
    let mut key = [0u8; 32];
    let ct = JSON.as_ptr().cast::<c_char>();
    assert_eq!(unsafe { swh_dedup_key(body.as_ptr(), body.len(), ct, JSON.len(), key.as_mut_ptr()) }, SWH_OK);
    let (s1, s1n) = ("s1".as_ptr().cast::<c_char>(), 2);
    unsafe {
        fails(swh_engine_release(null(), s1, s1n, key.as_ptr()), SWH_NULL_ARGUMENT);
        fails(swh_engine_release(e, s1, s1n, null()), SWH_NULL_ARGUMENT);
        fails(swh_engine_release(e, "s9".as_ptr().cast(), 2, key.as_ptr()), SWH_UNKNOWN_STRATEGY);
        fails(swh_engine_release(e, b"\xff".as_ptr().cast(), 1, key.as_ptr()), SWH_INVALID_UTF8);
        assert_eq!(swh_engine_release(e, s1, s1n, key.as_ptr()), SWH_OK);
    }
    assert_eq!(post(e, TOKEN, body, T0 + 2_000).1, r#"{"status":"processed"}"#, "the retry trades");
    assert_eq!(post(e, TOKEN, body, T0 + 3_000).1, r#"{"status":"duplicate"}"#);
    assert_eq!(unsafe { swh_engine_free(e) }, SWH_OK);
}

#[test]
fn deliver_answers_like_the_rust_engine() {
    let _g = serial();
    let e = new_engine();
    assert_eq!(upsert(e, &snapshot("s1", TOKEN, "active")), SWH_OK);
    assert_eq!(upsert(e, &snapshot("s2", TOKEN2, "paused")), SWH_OK);
    let rust = Engine::new();
    rust.upsert(Strategy::from_json(snapshot("s1", TOKEN, "active").as_bytes()).unwrap()).unwrap();
    rust.upsert(Strategy::from_json(snapshot("s2", TOKEN2, "paused").as_bytes()).unwrap()).unwrap();

    let big = " ".repeat(262_145);
    let cases: [(&str, &str, u16); 6] = [
        ("nope", REJECTED, 400),
        (TOKEN3, REJECTED, 404),
        (TOKEN2, REJECTED, 200),
        (TOKEN, REJECTED, 200),
        (TOKEN, REJECTED, 200),
        (TOKEN, &big, 413),
    ];
    for (i, (token, body, status)) in cases.into_iter().enumerate() {
        let now = T0 + i as i64;
        let (s, b, v) = read(deliver(e, token, body, now).unwrap());
        let expected = rust.deliver(token.as_bytes(), body.as_bytes(), Some(JSON), now);
        assert_eq!(s, status);
        assert_eq!(s, expected.http_status);
        assert_eq!(b, expected.response);
        assert_eq!(v, serde_json::from_str::<serde_json::Value>(&expected.to_json()).unwrap());
    }
    assert_eq!(post(e, TOKEN, REJECTED, T0 + 10).1, r#"{"status":"duplicate"}"#);
    assert_eq!(unsafe { swh_engine_free(e) }, SWH_OK);
}

#[test]
fn deliver_argument_errors_leave_the_out_parameter_alone() {
    let _g = serial();
    let e = new_engine();
    let mut sentinel = 0u8;
    let mark = (&mut sentinel as *mut u8).cast::<swh_outcome>();
    let mut o = mark;
    let (t, b, ct) = (TOKEN.as_ptr(), b"{}".as_ptr(), JSON.as_ptr().cast::<c_char>());
    unsafe {
        let m = fails(swh_engine_deliver(e, t, 64, b, 2, b"\xff".as_ptr().cast(), 1, T0, &mut o), SWH_INVALID_UTF8);
        assert!(m.contains("content_type"), "{m}");
        assert!(
            fails(swh_engine_deliver(e, t, 64, null(), 5, ct, 16, T0, &mut o), SWH_INVALID_ARGUMENT).contains("body")
        );
        fails(swh_engine_deliver(e, null(), 64, b, 2, ct, 16, T0, &mut o), SWH_INVALID_ARGUMENT);
        fails(swh_engine_deliver(e, t, 64, b, 2, null(), 16, T0, &mut o), SWH_INVALID_ARGUMENT);
        fails(swh_engine_deliver(null(), t, 64, b, 2, ct, 16, T0, &mut o), SWH_NULL_ARGUMENT);
        fails(swh_engine_deliver(e, t, 64, b, 2, ct, 16, T0, null_mut()), SWH_NULL_ARGUMENT);
        fails(swh_engine_dry_run(e, t, 64, null(), 5, ct, 16, T0, &mut o), SWH_INVALID_ARGUMENT);
        fails(swh_engine_dry_run(e, t, 64, b, 2, b"\x80".as_ptr().cast(), 1, T0, &mut o), SWH_INVALID_UTF8);
        fails(swh_engine_dry_run(null(), t, 64, b, 2, ct, 16, T0, &mut o), SWH_NULL_ARGUMENT);
        fails(swh_engine_dry_run(e, t, 64, b, 2, ct, 16, T0, null_mut()), SWH_NULL_ARGUMENT);
        assert_eq!(o, mark);
        // NULL/0 buffers are empty: an empty token is a 400 outcome, not an argument error.
        let mut o = null_mut();
        assert_eq!(swh_engine_deliver(e, null(), 0, null(), 0, null(), 0, T0, &mut o), SWH_OK);
        assert_eq!(read(o).0, 400);
        assert_eq!(swh_engine_free(e), SWH_OK);
    }
}

#[test]
fn a_dry_run_records_nothing() {
    let _g = serial();
    let e = new_engine();
    assert_eq!(upsert(e, &snapshot("s1", TOKEN, "active")), SWH_OK);
    let dry = || {
        let mut o = null_mut();
        let r = unsafe {
            swh_engine_dry_run(e, TOKEN.as_ptr(), 64, REJECTED.as_ptr(), REJECTED.len(), null(), 0, T0, &mut o)
        };
        assert_eq!(r, SWH_OK);
        read(o).1
    };
    assert!(dry().starts_with(r#"{"status":"rejected""#));
    assert!(post(e, TOKEN, REJECTED, T0).1.starts_with(r#"{"status":"rejected""#));
    assert_eq!(dry(), r#"{"status":"duplicate"}"#);
    assert_eq!(unsafe { swh_engine_free(e) }, SWH_OK);
}

#[test]
fn validate_without_an_engine() {
    let _g = serial();
    let s1 = snapshot("s1", TOKEN, "active");
    let run = |snap: &str, body: &str| {
        let mut o = null_mut();
        let r = unsafe { swh_validate(snap.as_ptr(), snap.len(), body.as_ptr(), body.len(), null(), 0, T0, &mut o) };
        (r, o)
    };
    for _ in 0..2 {
        let (r, o) = run(&s1, REJECTED);
        assert_eq!(r, SWH_OK);
        let (status, body, v) = read(o);
        assert_eq!(status, 200);
        assert!(body.starts_with(r#"{"status":"rejected""#), "nothing recorded, so never a duplicate: {body}");
        assert_eq!(v["strategy"], "s1");
    }
    let (r, o) = run(&snapshot("s2", TOKEN2, "paused"), REJECTED);
    assert_eq!(r, SWH_OK);
    assert_eq!(read(o).1, r#"{"rejected":true,"reason":"strategy is paused"}"#);

    let (r, o) = run("{}", REJECTED);
    assert!(fails(r, SWH_INVALID_SNAPSHOT).contains("invalid strategy snapshot"));
    assert!(o.is_null());
    let mut o = null_mut();
    let (b, bn) = (REJECTED.as_ptr(), REJECTED.len());
    unsafe {
        fails(swh_validate(null(), 0, b, bn, null(), 0, T0, &mut o), SWH_INVALID_SNAPSHOT);
        fails(swh_validate(null(), 4, b, bn, null(), 0, T0, &mut o), SWH_INVALID_ARGUMENT);
        fails(swh_validate(s1.as_ptr(), s1.len(), null(), 4, null(), 0, T0, &mut o), SWH_INVALID_ARGUMENT);
        fails(swh_validate(s1.as_ptr(), s1.len(), b, bn, b"\xfe".as_ptr().cast(), 1, T0, &mut o), SWH_INVALID_UTF8);
        fails(swh_validate(s1.as_ptr(), s1.len(), b, bn, null(), 0, T0, null_mut()), SWH_NULL_ARGUMENT);
    }
    assert!(o.is_null());
}

fn parse(body: &[u8], ct: Option<&str>) -> Result<*mut swh_parsed, swh_result> {
    let mut p = null_mut();
    let (c, cn) = ct.map_or((null(), 0), |c| (c.as_ptr().cast(), c.len()));
    match unsafe { swh_parse(body.as_ptr(), body.len(), c, cn, &mut p) } {
        SWH_OK => Ok(p),
        r => {
            assert!(p.is_null());
            Err(r)
        }
    }
}

fn parsed(p: *mut swh_parsed) -> (bool, String, String) {
    let mut ok = false;
    let (mut a, mut an, mut r, mut rn) = (null(), 0, null(), 0);
    unsafe {
        assert_eq!(swh_parsed_ok(p, &mut ok), SWH_OK);
        assert_eq!(swh_parsed_alerts_json(p, &mut a, &mut an), SWH_OK);
        assert_eq!(swh_parsed_reason(p, &mut r, &mut rn), SWH_OK);
    }
    let out = (ok, text(a, an), text(r, rn));
    assert_eq!(unsafe { swh_parsed_free(p) }, SWH_OK);
    out
}

#[test]
fn parse_only() {
    let _g = serial();
    let body = br#"{"ticker":"NASDAQ:AAPL","action":"buy","price":"190.50"}"#;
    let (ok, alerts, reason) = parsed(parse(body, Some(JSON)).unwrap());
    assert!(ok);
    assert_eq!(reason, "");
    let v: serde_json::Value = serde_json::from_str(&alerts).unwrap();
    let expected = serde_json::to_value(strategy_webhook::parse(body, Some(JSON)).unwrap()).unwrap();
    assert_eq!(v, expected);
    assert_eq!(v[0]["instrument"], "AAPL");

    let (ok, alerts, reason) = parsed(parse(br#"{"action":"buy"}"#, None).unwrap());
    assert!(!ok);
    assert_eq!(alerts, "[]");
    assert!(reason.contains("instrument"), "{reason}");
    let (ok, _, reason) = parsed(parse(b"", None).unwrap());
    assert!(!ok && reason.contains("empty"));

    unsafe {
        let mut p = null_mut();
        fails(swh_parse(null(), 3, null(), 0, &mut p), SWH_INVALID_ARGUMENT);
        fails(swh_parse(body.as_ptr(), body.len(), null(), 3, &mut p), SWH_INVALID_ARGUMENT);
        fails(swh_parse(body.as_ptr(), body.len(), b"text/\xff".as_ptr().cast(), 6, &mut p), SWH_INVALID_UTF8);
        fails(swh_parse(body.as_ptr(), body.len(), null(), 0, null_mut()), SWH_NULL_ARGUMENT);
        assert!(p.is_null());

        let p = parse(body, None).unwrap();
        let (mut ok, mut t, mut n) = (false, null(), 0);
        fails(swh_parsed_ok(null(), &mut ok), SWH_NULL_ARGUMENT);
        fails(swh_parsed_ok(p, null_mut()), SWH_NULL_ARGUMENT);
        fails(swh_parsed_alerts_json(null(), &mut t, &mut n), SWH_NULL_ARGUMENT);
        fails(swh_parsed_alerts_json(p, null_mut(), &mut n), SWH_NULL_ARGUMENT);
        fails(swh_parsed_alerts_json(p, &mut t, null_mut()), SWH_NULL_ARGUMENT);
        fails(swh_parsed_reason(null(), &mut t, &mut n), SWH_NULL_ARGUMENT);
        fails(swh_parsed_reason(p, null_mut(), &mut n), SWH_NULL_ARGUMENT);
        fails(swh_parsed_reason(p, &mut t, null_mut()), SWH_NULL_ARGUMENT);
        assert_eq!(swh_parsed_free(p), SWH_OK);
    }
}

#[test]
fn handles_are_checked() {
    let _g = serial();
    let e = new_engine();
    assert_eq!(upsert(e, &snapshot("s1", TOKEN, "active")), SWH_OK);
    let o = deliver(e, TOKEN, REJECTED, T0).unwrap();
    let p = parse(REJECTED.as_bytes(), None).unwrap();
    let (mut status, mut t, mut n, mut ok) = (0u16, null(), 0, false);
    unsafe {
        fails(swh_outcome_http_status(null(), &mut status), SWH_NULL_ARGUMENT);
        fails(swh_outcome_http_status(o, null_mut()), SWH_NULL_ARGUMENT);
        fails(swh_outcome_response(null(), &mut t, &mut n), SWH_NULL_ARGUMENT);
        fails(swh_outcome_response(o, null_mut(), &mut n), SWH_NULL_ARGUMENT);
        fails(swh_outcome_response(o, &mut t, null_mut()), SWH_NULL_ARGUMENT);
        fails(swh_outcome_json(null(), &mut t, &mut n), SWH_NULL_ARGUMENT);
        fails(swh_outcome_json(o, null_mut(), &mut n), SWH_NULL_ARGUMENT);
        fails(swh_outcome_json(o, &mut t, null_mut()), SWH_NULL_ARGUMENT);

        // The JSON is made once and kept: the same buffer every time.
        let (mut j1, mut j2) = (null(), null());
        assert_eq!(swh_outcome_json(o, &mut j1, &mut n), SWH_OK);
        assert_eq!(swh_outcome_json(o, &mut j2, &mut n), SWH_OK);
        assert_eq!(j1, j2);

        // Wrong types and foreign pointers.
        fails(swh_outcome_http_status(e.cast(), &mut status), SWH_INVALID_HANDLE);
        fails(swh_parsed_ok(o.cast(), &mut ok), SWH_INVALID_HANDLE);
        fails(swh_engine_upsert(p.cast(), b"{}".as_ptr(), 2), SWH_INVALID_HANDLE);
        fails(swh_outcome_free(e.cast()), SWH_INVALID_HANDLE);
        fails(swh_parsed_free(o.cast()), SWH_INVALID_HANDLE);
        let mut local = 0u64;
        assert!(fails(swh_engine_free((&mut local as *mut u64).cast()), SWH_INVALID_HANDLE).contains("swh_engine"));

        // Use after free and double free.
        assert_eq!(swh_outcome_free(o), SWH_OK);
        status = 7;
        fails(swh_outcome_http_status(o, &mut status), SWH_INVALID_HANDLE);
        assert_eq!(status, 7);
        fails(swh_outcome_response(o, &mut t, &mut n), SWH_INVALID_HANDLE);
        fails(swh_outcome_json(o, &mut t, &mut n), SWH_INVALID_HANDLE);
        assert!(fails(swh_outcome_free(o), SWH_INVALID_HANDLE).contains("freed"));

        assert_eq!(swh_parsed_free(p), SWH_OK);
        fails(swh_parsed_ok(p, &mut ok), SWH_INVALID_HANDLE);
        fails(swh_parsed_alerts_json(p, &mut t, &mut n), SWH_INVALID_HANDLE);
        fails(swh_parsed_reason(p, &mut t, &mut n), SWH_INVALID_HANDLE);
        fails(swh_parsed_free(p), SWH_INVALID_HANDLE);

        assert_eq!(swh_engine_free(e), SWH_OK);
        assert_eq!(deliver(e, TOKEN, REJECTED, T0), Err(SWH_INVALID_HANDLE));
        fails(upsert(e, "{}"), SWH_INVALID_HANDLE);
        fails(swh_engine_remove(e, b"s1".as_ptr().cast(), 2), SWH_INVALID_HANDLE);
        fails(swh_engine_rotate(e, b"s1".as_ptr().cast(), 2, TOKEN3.as_ptr(), 64), SWH_INVALID_HANDLE);
        let mut o = null_mut();
        fails(swh_engine_dry_run(e, TOKEN.as_ptr(), 64, null(), 0, null(), 0, T0, &mut o), SWH_INVALID_HANDLE);
        fails(swh_engine_free(e), SWH_INVALID_HANDLE);

        // free(NULL) does nothing.
        assert_eq!(swh_engine_free(null_mut()), SWH_OK);
        assert_eq!(swh_outcome_free(null_mut()), SWH_OK);
        assert_eq!(swh_parsed_free(null_mut()), SWH_OK);
    }
}

#[test]
fn one_engine_many_threads() {
    let _g = serial();
    let e = new_engine() as usize;
    assert_eq!(upsert(e as *const _, &snapshot("s1", TOKEN, "active")), SWH_OK);
    let bodies: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    (0..10).map(|i| post(e as *const _, TOKEN, REJECTED, T0 + t * 10 + i).1).collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let duplicates = bodies.iter().filter(|b| *b == r#"{"status":"duplicate"}"#).count();
    assert_eq!(duplicates, 39, "two identical deliveries racing each other trade exactly once");
    assert_eq!(unsafe { swh_engine_free(e as *mut _) }, SWH_OK);
}

#[test]
fn freeing_an_engine_while_another_thread_delivers_is_safe() {
    let _g = serial();
    let e = new_engine() as usize;
    assert_eq!(upsert(e as *const _, &snapshot("s1", TOKEN, "active")), SWH_OK);
    let worker = std::thread::spawn(move || {
        // Deliver until the handle is gone (bounded in time); 429s are answers too.
        let start = std::time::Instant::now();
        let mut answered = 0u64;
        while start.elapsed() < std::time::Duration::from_secs(10) {
            match deliver(e as *const _, TOKEN, REJECTED, T0) {
                Ok(o) => {
                    read(o);
                    answered += 1;
                }
                Err(r) => return (answered, Some(r)),
            }
        }
        (answered, None)
    });
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(unsafe { swh_engine_free(e as *mut _) }, SWH_OK);
    let (answered, ended) = worker.join().unwrap();
    assert_eq!(ended, Some(SWH_INVALID_HANDLE), "after {answered} answers");
}

/// Engines, outcomes and parse results created, used and freed on many threads at once.
/// Every live handle answers; afterwards every freed one, used or freed again or passed
/// as another type, gives `SWH_INVALID_HANDLE`. The freed handles are checked only once
/// no thread creates handles any more, so none of their addresses can have been handed
/// out again meanwhile.
#[test]
fn handles_from_many_threads() {
    const THREADS: usize = 8;
    const KEPT: usize = 40;
    const CHURN: usize = 200;
    let _g = serial();
    let shared = new_engine() as usize;
    assert_eq!(upsert(shared as *const _, &snapshot("s1", TOKEN, "active")), SWH_OK);
    let created = std::sync::Barrier::new(THREADS);
    let freed = std::sync::Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (created, freed) = (&created, &freed);
            s.spawn(move || {
                let shared = shared as *const swh_engine;
                // Created here and kept alive until every thread has created its own
                // (more in all than the registry keeps without allocating).
                let engine = new_engine();
                let id = format!("t{t}");
                assert_eq!(upsert(engine, &snapshot(&id, &format!("{t:064x}"), "active")), SWH_OK);
                let (mut outcomes, mut statuses, mut parses) = (Vec::new(), Vec::new(), Vec::new());
                let (mut status, mut ok) = (0u16, false);
                for i in 0..KEPT {
                    let o = deliver(shared, TOKEN, REJECTED, T0 + (t * KEPT + i) as i64).unwrap();
                    assert_eq!(unsafe { swh_outcome_http_status(o, &mut status) }, SWH_OK);
                    assert!(status == 200 || status == 429, "{status}");
                    outcomes.push(o);
                    statuses.push(status);
                    parses.push(parse(REJECTED.as_bytes(), None).unwrap());
                }
                // Churn: handles created, used and freed at once, beside the others.
                for i in 0..CHURN {
                    let (status, _) = post(engine, &format!("{t:064x}"), REJECTED, T0 + i as i64);
                    assert!(status == 200 || status == 429, "{status}");
                    let (ok, _, _) = parsed(parse(REJECTED.as_bytes(), None).unwrap());
                    assert!(ok);
                }
                created.wait();

                // Every kept handle still answers as it did, and refuses to be taken for
                // another type.
                for ((&o, &p), &was) in outcomes.iter().zip(&parses).zip(&statuses) {
                    unsafe {
                        assert_eq!(swh_outcome_http_status(o, &mut status), SWH_OK);
                        assert_eq!(status, was);
                        assert_eq!(swh_parsed_ok(p, &mut ok), SWH_OK);
                        assert!(ok);
                        assert_eq!(swh_outcome_http_status(p.cast(), &mut status), SWH_INVALID_HANDLE);
                        assert_eq!(swh_parsed_ok(o.cast(), &mut ok), SWH_INVALID_HANDLE);
                        assert_eq!(swh_engine_upsert(o.cast(), b"{}".as_ptr(), 2), SWH_INVALID_HANDLE);
                        assert_eq!(swh_outcome_free(engine.cast()), SWH_INVALID_HANDLE);
                    }
                }
                // Freed while the other threads still use theirs.
                for (&o, &p) in outcomes.iter().zip(&parses) {
                    unsafe {
                        assert_eq!(swh_outcome_free(o), SWH_OK);
                        assert_eq!(swh_parsed_free(p), SWH_OK);
                    }
                }
                assert_eq!(unsafe { swh_engine_free(engine) }, SWH_OK);
                freed.wait();

                for (&o, &p) in outcomes.iter().zip(&parses) {
                    unsafe {
                        assert_eq!(swh_outcome_http_status(o, &mut status), SWH_INVALID_HANDLE);
                        assert_eq!(swh_parsed_ok(p, &mut ok), SWH_INVALID_HANDLE);
                        assert_eq!(swh_outcome_free(o), SWH_INVALID_HANDLE);
                        assert_eq!(swh_parsed_free(p), SWH_INVALID_HANDLE);
                    }
                }
                assert_eq!(deliver(engine, TOKEN, REJECTED, T0), Err(SWH_INVALID_HANDLE));
                assert_eq!(unsafe { swh_engine_free(engine) }, SWH_INVALID_HANDLE);
            });
        }
    });
    // The shared engine outlived it all.
    let status = post(shared as *const _, TOKEN, REJECTED, T0).0;
    assert!(status == 200 || status == 429, "{status}");
    assert_eq!(unsafe { swh_engine_free(shared as *mut _) }, SWH_OK);
    assert_eq!(unsafe { swh_engine_free(shared as *mut _) }, SWH_INVALID_HANDLE);
}

/// `swh_engine_deliver_settled` through the ABI (a host keeping the windows in its own database): what it
/// answers, and whether the host counts the delivery and keeps its claim, for each rate and claim answer; the
/// engine's own windows are not touched; a `claim` out of range and NULL out-parameters are refused.
#[test]
fn deliver_settled_tells_the_host_what_to_record() {
    let _s = serial();
    let token = "c".repeat(64);
    let e = new_engine();
    assert_eq!(upsert(e, &snapshot("s", &token, "active")), SWH_OK);
    // The call itself, out-parameters as given (NULL ones included).
    let raw = |within: bool, claim: u32, body: &str, now: i64, out: &mut *mut swh_outcome, counted, keeps| unsafe {
        swh_engine_deliver_settled(
            e,
            within,
            claim,
            token.as_ptr(),
            token.len(),
            body.as_ptr(),
            body.len(),
            JSON.as_ptr().cast(),
            JSON.len(),
            now,
            out,
            counted,
            keeps,
        )
    };
    let settled = |within: bool, claim: u32, body: &str, now: i64| -> Result<(u16, String, bool, bool), swh_result> {
        let (mut o, mut counted, mut keeps) = (null_mut(), false, false);
        let r = raw(within, claim, body, now, &mut o, &mut counted, &mut keeps);
        if r != SWH_OK {
            assert!(o.is_null(), "out-parameter written on failure");
            return Err(r);
        }
        let (status, _, v) = read(o);
        Ok((status, v["decision"].as_str().unwrap_or_default().to_string(), counted, keeps))
    };
    let buy = r#"{"ticker":"AAPL","action":"buy"}"#;
    let fresh = swh_claim::SWH_CLAIM_FRESH as u32;
    assert_eq!(settled(true, fresh, buy, 1).unwrap(), (200, "processed".into(), true, true));
    // The host's claim says duplicate: answered so, counted, the claim not the host's to keep.
    assert_eq!(
        settled(true, swh_claim::SWH_CLAIM_DUPLICATE as u32, buy, 2).unwrap(),
        (200, "duplicate".into(), true, false)
    );
    // Over the host's rate window: 429, neither counted nor claimed.
    assert_eq!(settled(false, fresh, buy, 3).unwrap(), (429, "error".into(), false, false));
    // Rejected by the rules: counted, and the claim kept (a resend is the same refusal).
    let msft = r#"{"ticker":"MSFT","action":"buy"}"#;
    assert_eq!(settled(true, fresh, msft, 4).unwrap(), (200, "rejected".into(), true, true));
    // Whatever the answer, the claim is kept exactly when it is a 200 (an error, such as the 422 of five legs,
    // gives it back, so that the corrected resend trades).
    let five_legs = settled(true, fresh, r#"{"ticker":"AAPL","action":"buy","legs":[1,2,3,4,5]}"#, 4).unwrap();
    assert_eq!((five_legs.0, five_legs.3), (422, false));
    for (i, body) in ["{", "not an alert", r#"{"ticker":"AAPL","action":"buy","legs":[1,2,3,4,5]}"#].iter().enumerate()
    {
        let (status, _, counted, keeps) = settled(true, fresh, body, 5 + i as i64).unwrap();
        assert!(counted, "{body}");
        assert_eq!(keeps, status == 200, "{body}: {status}");
    }
    // The engine's own windows were not touched: the same alert through them is fresh.
    assert_eq!(post(e, &token, buy, 10).0, 200);
    assert_eq!(deliver(e, &token, buy, 11).map(|o| read(o).2["decision"].clone()), Ok("duplicate".into()));
    let m = fails(settled(true, 7, buy, 12).unwrap_err(), SWH_INVALID_ARGUMENT);
    assert!(m.contains("`claim` is 7"), "{m}");
    let mut o = null_mut();
    let r = raw(true, fresh, buy, 13, &mut o, null_mut(), null_mut());
    fails(r, SWH_NULL_ARGUMENT);
    assert!(o.is_null());
    assert_eq!(unsafe { swh_engine_free(e) }, SWH_OK);
}

/// A snapshot listing a working order whose size is not known (`"size_known": false`, with the `notional` it was
/// sized by) loads through the C ABI, and a CLOSE pulls that order before it sells; an order of 0 without the mark
/// is refused, naming the field.
#[test]
fn a_working_order_whose_size_is_not_known_loads_and_a_close_pulls_it() {
    let _g = serial();
    let mut v: serde_json::Value = serde_json::from_str(&snapshot("s1", TOKEN, "active")).unwrap();
    v["bots"][0]["positions"] = serde_json::json!([{"instrument": "AAPL", "direction": "long", "quantity": "10"}]);
    v["bots"][0]["working_orders"] = serde_json::json!([{"id": "n1", "instrument": "AAPL", "direction": "long",
        "intent": "exit", "order_type": "market", "quantity": "0", "size_known": false, "notional": "500",
        "state": "accepted"}]);
    let e = new_engine();
    assert_eq!(upsert(e, &v.to_string()), SWH_OK, "{}", last_error());
    let (status, _, out) = read(deliver(e, TOKEN, r#"{"ticker":"AAPL","action":"sell"}"#, T0).unwrap());
    assert_eq!(status, 200, "{out}");
    let sent: Vec<(&str, Option<&str>)> = out["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["kind"].as_str().unwrap(), o["order_id"].as_str()))
        .collect();
    assert_eq!(sent, [("cancel", Some("n1")), ("place", None)], "{out}");
    v["bots"][0]["working_orders"][0].as_object_mut().unwrap().remove("size_known");
    v["bots"][0]["working_orders"][0].as_object_mut().unwrap().remove("notional");
    let m = fails(upsert(e, &v.to_string()), SWH_INVALID_SNAPSHOT);
    assert!(m.contains("`bots[0].working_orders[0].quantity` must be above zero"), "{m}");
    assert_eq!(unsafe { swh_engine_free(e) }, SWH_OK);
}

/// `SWH_MAX_LEGS` is the most legs one order may have, and a snapshot with more is refused: a working order of five
/// legs loaded, and every MODIFY of it was a 500. A held leg of ratio 0 (in a position or a working order), which
/// nothing can count, is refused at load too rather than at every CLOSE. A position may hold more than four legs.
#[test]
fn a_snapshot_with_a_working_order_past_the_legs_limit_or_a_leg_of_ratio_0_is_refused() {
    let _g = serial();
    let legs = |strikes: &[u32], ratio: u32| -> Vec<serde_json::Value> {
        strikes
            .iter()
            .map(|k| {
                serde_json::json!({"symbol": format!("SPY240119C00{k}000"), "action": "sell_to_open", "ratio": ratio})
            })
            .collect()
    };
    let snapshot = |working: Vec<serde_json::Value>, held: Vec<serde_json::Value>| {
        serde_json::json!({
            "id": "o", "token_hash": TOKEN, "status": "active", "asset_class": "option", "order_type": "limit",
            "allowed_instruments": ["SPY"], "options": {"selection": "external"},
            "bots": [{"id": "b", "broker": "alpaca", "account_id": "A1", "sizing": {"fixed_quantity": "1"},
                "positions": [{"instrument": "SPY", "direction": "short", "quantity": "1", "legs": held}],
                "working_orders": [{"id": "w1", "instrument": "SPY", "direction": "short", "intent": "exit",
                    "order_type": "limit", "price": "1.5", "quantity": "1", "state": "open", "legs": working}]}]
        })
        .to_string()
    };
    let five = [445, 450, 455, 460, 465];
    for (snap, want) in [
        (snapshot(legs(&five[..4], 1), legs(&five, 1)), SWH_OK),
        (snapshot(legs(&five, 1), legs(&five, 1)), SWH_INVALID_SNAPSHOT),
        (snapshot(legs(&five[..2], 0), legs(&five, 1)), SWH_INVALID_SNAPSHOT),
        (snapshot(legs(&five[..2], 1), legs(&five[..2], 0)), SWH_INVALID_SNAPSHOT),
    ] {
        let e = new_engine();
        let r = upsert(e, &snap);
        assert_eq!(unsafe { swh_engine_free(e) }, SWH_OK);
        assert_eq!(r, want, "{snap}");
    }
}
