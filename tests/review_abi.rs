//! Review probes (C ABI and the core's dedup and rate windows): each test fails on the reviewed code.

mod common;

use common::*;
use strategy_webhook::Decision;

/// README: "The host's clock going back by more than 30 s (an NTP step ...) moves every key seen later back by the
/// step ..., keeping the age it had at the latest entry ...: a key 290 s old at the step expires 10 s after it."
/// With a step shorter than the key's age (here 200 s), the key is seen *earlier* than the new time, so it is not
/// moved at all: it keeps its old-clock time on the new clock and lasts the whole step longer. The same alert sent
/// 301 s after the first (a new alert per the spec's dedup rule 3) is answered `duplicate`: the order is lost.
#[test]
fn a_step_back_shorter_than_a_keys_age_still_keeps_its_age() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    // Deliveries on the clock, then the clock corrected back by 200 s, then deliveries on the new clock (dense
    // enough that the step is kept, not taken for an outlier).
    let other = |i: i64| format!(r#"{{"ticker":"MSFT","action":"buy","metadata":{{"message_id":"m{i}"}}}}"#);
    assert_eq!(post(&e, &other(0), T0 + 290_000).decision, Decision::Processed);
    let back = 200_000;
    for (i, real) in [291_000i64, 293_000, 295_000, 297_000, 299_000].into_iter().enumerate() {
        assert_eq!(post(&e, &other(1 + i as i64), T0 + real - back).decision, Decision::Processed);
    }
    // AAPL again, 301 s (real) after it was first seen: past the window, a new alert.
    let o = post(&e, a, T0 + 301_000 - back);
    assert_eq!(o.decision, Decision::Processed, "AAPL was seen 301 s ago (290 s old at the step): {}", o.to_json());
}
