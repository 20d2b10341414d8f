//! The C ABI entry points with arbitrary bytes: parse, validate, the dedup key, and an
//! engine's deliver/dry run/settled delivery and deliveries into one reused outcome, every
//! handle freed, every accessor called.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::ptr;
use strategy_webhook::ffi::*;

const DEMO: &[u8] = include_bytes!("../../examples/strategies/demo.json");

unsafe fn drain_outcome(o: *mut swh_outcome) {
    let mut status = 0u16;
    assert!(matches!(swh_outcome_http_status(o, &mut status), swh_result::SWH_OK));
    let (mut p, mut n) = (ptr::null(), 0usize);
    assert!(matches!(swh_outcome_response(o, &mut p, &mut n), swh_result::SWH_OK));
    assert!(matches!(swh_outcome_json(o, &mut p, &mut n), swh_result::SWH_OK));
    assert!(matches!(swh_outcome_free(o), swh_result::SWH_OK));
    // A second free is detected, never a crash.
    assert!(!matches!(swh_outcome_free(o), swh_result::SWH_OK));
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let split = (data[0] as usize * data.len() / 256).min(data.len());
    let (a, b) = data[1..].split_at(split.saturating_sub(1).min(data.len() - 1));
    let ct = b"text/plain";
    unsafe {
        let mut parsed = ptr::null_mut();
        if matches!(swh_parse(b.as_ptr(), b.len(), a.as_ptr().cast(), a.len().min(32), &mut parsed), swh_result::SWH_OK) {
            let mut ok = false;
            let _ = swh_parsed_ok(parsed, &mut ok);
            let (mut p, mut n) = (ptr::null(), 0usize);
            let _ = swh_parsed_alerts_json(parsed, &mut p, &mut n);
            let _ = swh_parsed_reason(parsed, &mut p, &mut n);
            assert!(matches!(swh_parsed_free(parsed), swh_result::SWH_OK));
        }
        let mut out = ptr::null_mut();
        if matches!(swh_validate(a.as_ptr(), a.len(), b.as_ptr(), b.len(), ct.as_ptr().cast(), ct.len(), 0, &mut out), swh_result::SWH_OK) {
            drain_outcome(out);
        }
        let mut engine = ptr::null_mut();
        assert!(matches!(swh_engine_new(&mut engine), swh_result::SWH_OK));
        let _ = swh_engine_upsert(engine, DEMO.as_ptr(), DEMO.len());
        let _ = swh_engine_upsert(engine, a.as_ptr(), a.len());
        let token = if a.len() >= 64 { &a[..64] } else { &b"d4080c65a7ec92cae69c9e5e26b0bdc2bf10f18df4eee5217ef0d1eb5ec3874c"[..] };
        for dry in [false, true] {
            let mut out = ptr::null_mut();
            let r = if dry {
                swh_engine_dry_run(engine, token.as_ptr(), token.len(), b.as_ptr(), b.len(), ptr::null(), 0, 1, &mut out)
            } else {
                swh_engine_deliver(engine, token.as_ptr(), token.len(), b.as_ptr(), b.len(), ptr::null(), 0, 1, &mut out)
            };
            if matches!(r, swh_result::SWH_OK) {
                drain_outcome(out);
            }
        }
        // One outcome refilled by delivery after delivery, as a host reuses it: made on the
        // first call, read after each, and after a refused call (a freed one) still the
        // same live outcome.
        let mut reused = ptr::null_mut();
        for (i, chunk) in b.chunks(b.len() / 3 + 1).enumerate() {
            let ct: &[u8] = if i % 2 == 0 { b"application/json" } else { b"" };
            let r = swh_engine_deliver_into(engine, token.as_ptr(), token.len(), chunk.as_ptr(), chunk.len(), ct.as_ptr().cast(), ct.len(), i as i64, &mut reused);
            assert!(matches!(r, swh_result::SWH_OK));
            let mut status = 0u16;
            assert!(matches!(swh_outcome_http_status(reused, &mut status), swh_result::SWH_OK));
            let (mut p, mut n) = (ptr::null(), 0usize);
            assert!(matches!(swh_outcome_response(reused, &mut p, &mut n), swh_result::SWH_OK));
            if i == 0 {
                assert!(matches!(swh_outcome_json(reused, &mut p, &mut n), swh_result::SWH_OK));
            }
        }
        if !reused.is_null() {
            drain_outcome(reused);
            // A freed outcome is refused, and the pointer left as it was.
            let before = reused;
            assert!(matches!(
                swh_engine_deliver_into(engine, token.as_ptr(), token.len(), b.as_ptr(), b.len(), ptr::null(), 0, 1, &mut reused),
                swh_result::SWH_INVALID_HANDLE
            ));
            assert!(reused == before);
        }
        let mut key = [0u8; 32];
        assert!(matches!(swh_dedup_key(b.as_ptr(), b.len(), ptr::null(), 0, key.as_mut_ptr()), swh_result::SWH_OK));
        // Any claim value, valid or not, with either rate answer: an outcome or a clear refusal.
        let claim = u32::from(data[0] % 4);
        let (mut counted, mut keeps) = (false, false);
        let mut out = ptr::null_mut();
        let r = swh_engine_deliver_settled(
            engine,
            data[0] & 0x80 != 0,
            claim,
            token.as_ptr(),
            token.len(),
            b.as_ptr(),
            b.len(),
            ptr::null(),
            0,
            1,
            &mut out,
            &mut counted,
            &mut keeps,
        );
        if matches!(r, swh_result::SWH_OK) {
            assert!(claim < 3 && !(keeps && claim != 0));
            drain_outcome(out);
        } else {
            assert!(out.is_null());
        }
        let _ = swh_engine_remove(engine, a.as_ptr().cast(), a.len().min(64));
        assert!(matches!(swh_engine_free(engine), swh_result::SWH_OK));
    }
});
