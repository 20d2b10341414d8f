//! Review of edcb054: failing tests for the windows under the host's clock.

use proptest::prelude::*;
use strategy_webhook::state::Claim;
use strategy_webhook::{Limits, MemoryStore, StateStore};

const T0: i64 = 1_705_676_400_000;
const S: i64 = 1_000;

/// One time an hour ahead (local for UTC once), then the next delivery on time but read 2 s before the latest
/// on-time entry (ordinary jitter between threads). It is "before the entry before the jump", so it is taken
/// for a step back from the jump's time: every key is aged by the hour and a resend trades again.
#[test]
fn one_time_ahead_then_a_slightly_stalled_delivery_keeps_the_keys() {
    let store = MemoryStore::default();
    let key = [2u8; 32];
    assert!(store.count("s", T0));
    assert_eq!(store.claim("s", &key, T0), Claim::Fresh);
    assert!(store.count("s", T0 + 10 * S));
    assert_eq!(store.claim("s", &[4u8; 32], T0 + 10 * S), Claim::Fresh);
    // The outlier, an hour ahead.
    let _ = store.count("s", T0 + 11 * S + 3_600 * S);
    let _ = store.claim("s", &[3u8; 32], T0 + 11 * S + 3_600 * S);
    // Real T0 + 12 s, read 4 s before (a thread that waited for the lock): stamped T0 + 8 s.
    let now = T0 + 8 * S;
    let _ = store.count("s", now);
    assert_eq!(store.claim("s", &key, now), Claim::Duplicate { log: true }, "claimed 12 s ago");
    let now = T0 + 13 * S;
    let _ = store.count("s", now);
    assert_eq!(store.claim("s", &[4u8; 32], now), Claim::Duplicate { log: true }, "claimed 3 s ago");
}

/// A quiet gap (the latest entry more than 30 s past the one before it), a full minute's burst, then one stalled
/// thread (150 s: the kind a_rare_stalled_thread_leaves_other_keys_their_window draws). The step back is taken
/// for "one time ahead": every rate mark later than the stalled time comes back to it, and expired at once on
/// the real clock, so a second full burst passes a second later.
#[test]
fn a_stalled_thread_after_a_quiet_gap_keeps_the_rate() {
    let store = MemoryStore::default();
    assert!(store.count("s", T0));
    // 200 s later, 59 deliveries stamped in one millisecond (a host whose clock reads in coarse steps, or stamps
    // a batch with one time).
    for _ in 0..59 {
        assert!(store.count("s", T0 + 200 * S));
    }
    // One thread stalled 150 s: read the clock at T0 + 50 s, counted at real T0 + 200 s (60th in the minute).
    let _ = store.count("s", T0 + 50 * S);
    // Real T0 + 201 s: 60 already counted in the last second of real time.
    let mut passed = 0;
    for i in 0..60 {
        if store.count("s", T0 + 201 * S + i) {
            passed += 1;
        }
    }
    assert_eq!(passed, 0, "{passed} more counted within 2 s of real time after 60");
}

fn real_time_check(
    store: &MemoryStore,
    claimed: &mut std::collections::HashMap<u8, i64>,
    counted: &mut Vec<i64>,
    real: i64,
    now: i64,
    k: u8,
    check: bool,
) -> Result<(), TestCaseError> {
    let key = [k; 32];
    if store.count("s", now) {
        counted.push(real);
    }
    let c = store.claim("s", &key, now);
    if check {
        if let (Some(r), Claim::Fresh) = (claimed.get(&k).copied(), c) {
            prop_assert!(real >= r + 300_000 - 50_000,
                "key {k} claimed at real {r} was fresh again at real {real} (now {now}), {} s early", (r + 300_000 - real) / 1000);
        }
    }
    if c == Claim::Fresh && check {
        claimed.insert(k, real);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, .. ProptestConfig::default() })]
    /// Sparse deliveries (gaps up to 200 s), ordinary jitter (25 s), and once a single time ahead by 31 s to 2 h
    /// (a host passing local time for UTC once). Keys claimed on time, checked on time, keep their windows
    /// within the two stalls.
    #[test]
    fn one_time_ahead_among_sparse_jittered_deliveries_keeps_the_keys(
        steps in proptest::collection::vec((0i64..200_000, 0i64..25_000, 0u8..4), 1..200),
        at in 0usize..200,
        ahead in 31_000i64..7_200_000,
    ) {
        let store = MemoryStore::default();
        let mut real = T0;
        let mut claimed = Default::default();
        let mut counted = Vec::new();
        for (i, (step, stall, k)) in steps.into_iter().enumerate() {
            real += step;
            if i == at {
                let _ = store.count("s", real + ahead);
                let _ = store.claim("s", &[200; 32], real + ahead);
                continue;
            }
            real_time_check(&store, &mut claimed, &mut counted, real, real - stall, k, true)?;
        }
    }

    /// Rate in real time: jitter up to 25 s, dense bursts and quiet gaps, and rarely a stalled thread 31-250 s.
    /// Never more than 60 counted within any 60 s - 50 s of real time (two stalls' slack).
    #[test]
    fn rate_in_real_time_with_bursts_gaps_and_a_rare_stall(
        steps in proptest::collection::vec((prop_oneof![3 => 0i64..50, 1 => 0i64..200_000], 0i64..25_000, prop_oneof![20 => Just(0i64), 1 => 31_000i64..250_000]), 1..400),
    ) {
        let store = MemoryStore::default();
        let mut real = T0;
        let mut counted: Vec<i64> = Vec::new();
        for (step, stall, far) in steps {
            real += step;
            let now = real - if far > 0 { far } else { stall };
            if store.count("s", now) {
                counted.push(real);
            }
        }
        for w in counted.windows(61) {
            prop_assert!(w[60] - w[0] >= 10_000, "61 counted within {} ms of real time", w[60] - w[0]);
        }
    }

    /// Any i64 times, with restores and uncounts: nothing panics; the rate list stays within the limit.
    #[test]
    fn any_times_never_panic(ops in proptest::collection::vec((0u8..7, prop_oneof![any::<i64>(), Just(i64::MIN), Just(i64::MAX), Just(0i64), (T0-1_000_000..T0+1_000_000), Just(7_258_118_400_001i64)], 0u8..6), 1..300)) {
        let store = MemoryStore::new(Limits { rate_limit: 5, rate_window_ms: 60_000, dedup_window_ms: 300_000 });
        for (op, t, k) in ops {
            let key = [k; 32];
            match op {
                0 => { let _ = store.count("s", t); }
                1 => { let _ = store.claim("s", &key, t); }
                2 => store.release("s", &key),
                3 => { let _ = store.peek_count("s", t); let _ = store.peek_claim("s", &key, t); }
                4 => store.restore_key("s", &key, t),
                5 => store.restore_rate("s", t),
                _ => { let _ = store.uncount("s", t); }
            }
            prop_assert!(store.heap_bytes("s") < 100_000);
        }
    }
}

#[derive(Debug, Clone)]
enum Ev {
    /// On time, with a stall under 25 s.
    On(i64, i64, u8),
    /// One delivery stalled 31 s to 10 min.
    Stalled(i64, i64),
    /// One delivery at time 0.
    Zero(i64),
    /// The clock corrected back (NTP step), by this much more offset.
    Back(i64, i64),
}

fn ev(sparse: bool) -> impl Strategy<Value = Ev> {
    let gap = if sparse { 0i64..150_000 } else { 0i64..20_000 };
    let gap = prop_oneof![1 => Just(0i64), 1 => 0i64..100, 2 => gap];
    ev_with(gap)
}

fn ev_rate() -> impl Strategy<Value = Ev> {
    ev_with(prop_oneof![4 => Just(0i64), 20 => 0i64..1_500, 1 => 0i64..150_000].boxed())
}

fn ev_with(gap: impl Strategy<Value = i64> + Clone + 'static) -> impl Strategy<Value = Ev> {
    prop_oneof![
        30 => (gap.clone(), 0i64..25_000, 0u8..5).prop_map(|(g, s, k)| Ev::On(g, s, k)),
        2 => (gap.clone(), 31_000i64..600_000).prop_map(|(g, f)| Ev::Stalled(g, f)),
        1 => gap.clone().prop_map(Ev::Zero),
        1 => (gap, 31_000i64..600_000).prop_map(|(g, b)| Ev::Back(g, b)),
    ]
}

fn run_mixed(evs: Vec<Ev>) -> Result<(), TestCaseError> {
    run_mixed_with(evs, false, true)
}

fn run_mixed_with(evs: Vec<Ev>, no_outlier_first_after_back: bool, keys: bool) -> Result<(), TestCaseError> {
    let mut just_back = false;
    let mut just_outlier = false;
    let mut last_outlier = i64::MIN / 2;
    let mut last_back = i64::MIN / 2;
    let store = MemoryStore::default();
    let mut real = T0;
    let mut offset = 0;
    let mut claimed = Default::default();
    let mut counted = Vec::new();
    for e in evs {
        match e {
            Ev::On(g, s, k) => {
                just_back = false;
                just_outlier = false;
                real += g;
                real_time_check(&store, &mut claimed, &mut counted, real, real - offset - s, k, keys)?;
            }
            Ev::Stalled(g, f) => {
                real += g;
                if no_outlier_first_after_back && (just_back || just_outlier || real - last_outlier < 300_000 || real - last_back < 60_000) { continue; }
                just_outlier = true;
                last_outlier = real;
                real_time_check(&store, &mut claimed, &mut counted, real, real - offset - f, 100, false)?;
            }
            Ev::Zero(g) => {
                real += g;
                if no_outlier_first_after_back && (just_back || just_outlier || real - last_outlier < 300_000 || real - last_back < 60_000) { continue; }
                just_outlier = true;
                last_outlier = real;
                real_time_check(&store, &mut claimed, &mut counted, real, 0, 101, false)?;
            }
            Ev::Back(g, b) => {
                real += g;
                if no_outlier_first_after_back && (just_outlier || real - last_outlier < 60_000) { continue; }
                last_back = real;
                offset += b;
                just_back = true;
            }
        }
    }
    counted.sort();
    for w in counted.windows(61) {
        prop_assert!(w[60] - w[0] >= 30_000, "61 counted within {} ms of real time", w[60] - w[0]);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, .. ProptestConfig::default() })]
    /// Stalled threads, a host passing 0, clock corrections back, mixed, dense: on-time keys never expire more
    /// than two stalls (50 s) early in real time.
    #[test]
    fn mixed_dense_keeps_the_keys(evs in proptest::collection::vec(ev(false), 1..300)) {
        run_mixed(evs)?;
    }
    /// Dense, no outlier as the first delivery after a correction.
    #[test]
    fn mixed_dense_b_keeps_the_keys(evs in proptest::collection::vec(ev(false), 1..300)) {
        run_mixed_with(evs, true, true)?;
    }
    /// Sparse, no outlier as the first delivery after a correction.
    #[test]
    fn mixed_sparse_b_keeps_the_keys(evs in proptest::collection::vec(ev(true), 1..200)) {
        run_mixed_with(evs, true, true)?;
    }
    /// Rate only, dense, every shape.
    #[test]
    fn mixed_dense_rate(evs in proptest::collection::vec(ev_rate(), 1..600)) {
        run_mixed_with(evs, false, false)?;
    }
    /// Rate only, dense, no outlier first after a correction.
    #[test]
    fn mixed_dense_rate_b(evs in proptest::collection::vec(ev_rate(), 1..600)) {
        run_mixed_with(evs, true, false)?;
    }
    /// The same, sparse.
    #[test]
    fn mixed_sparse_keeps_the_keys(evs in proptest::collection::vec(ev(true), 1..200)) {
        run_mixed(evs)?;
    }
}

/// The clock corrected back by 60 s, and the first delivery after it is a time out of line (a host passing 0 once).
/// The outlier's step is taken from the old clock's latest entry; the corrected clock's deliveries that follow are
/// neither back within 30 s of that clock nor a step back from 0: Steady, with every key aged from the old clock to
/// 0. The whole window expires and every resend trades again.
#[test]
fn an_outlier_first_after_a_corrected_clock_keeps_the_windows() {
    let store = MemoryStore::default();
    for i in 0..10u8 {
        let now = T0 + i64::from(i) * 10 * S;
        assert!(store.count("s", now));
        assert_eq!(store.claim("s", &[i; 32], now), Claim::Fresh);
    }
    // The clock corrected back by 60 s at real T0 + 95 s; the first delivery after is stamped 0.
    let back = 60 * S;
    let _ = store.count("s", 0);
    let _ = store.claim("s", &[200; 32], 0);
    // Real T0 + 100 s on the corrected clock: the resend of the alert claimed 10 s ago.
    let now = T0 + 100 * S - back;
    let _ = store.count("s", now);
    assert_eq!(store.claim("s", &[9; 32], now), Claim::Duplicate { log: true }, "claimed 10 s ago");
}

/// Same for the rate: a full window, the clock back 60 s, a host passing 0 once, and the marks are gone.
#[test]
fn an_outlier_first_after_a_corrected_clock_keeps_the_rate() {
    let limits = Limits { rate_limit: 5, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
    let store = MemoryStore::new(limits);
    for i in 0..5 {
        assert!(store.count("s", T0 + i * S));
    }
    let _ = store.count("s", 0);
    // Real T0 + 10 s, the clock corrected back by 60 s: five counted in the last 10 s of real time.
    assert!(!store.count("s", T0 + 10 * S - 60 * S), "the sixth delivery within 10 s");
}

/// Two stalled threads (250 s, then 40 s): the second is neither back within 30 s of the clock before the first's
/// step nor a step back from it, so it is read on the first's clock, where every key was aged back 245 s. The
/// second stalled thread carries the resend of an alert claimed 106 s before: it trades again.
#[test]
fn two_stalled_threads_keep_the_keys() {
    let store = MemoryStore::default();
    for i in 0..20u8 {
        let now = T0 + i64::from(i) * 10 * S;
        assert!(store.count("s", now));
        assert_eq!(store.claim("s", &[i; 32], now), Claim::Fresh);
    }
    // Real T0 + 195 s: a thread stalled 250 s.
    let _ = store.count("s", T0 + 195 * S - 250 * S);
    let _ = store.claim("s", &[200; 32], T0 + 195 * S - 250 * S);
    // Real T0 + 196 s: a thread stalled 40 s, the resend of the alert claimed at T0 + 90 s.
    let now = T0 + 196 * S - 40 * S;
    let _ = store.count("s", now);
    assert_eq!(store.claim("s", &[9; 32], now), Claim::Duplicate { log: true }, "claimed 106 s ago");
}

/// Lead, not a proven defect: four corrections back within three minutes (39-66 s each), then a host passing 0;
/// each step is measured between stalled stamps, and their errors stack: key 3 fresh again 70 s early (tolerance
/// 50 s). Run with --ignored.
#[test]
#[ignore]
fn replay_many_steps() {
    use Ev::*;
    let evs = vec![On(0,0,3,),On(9825,0,0,),On(8701,0,0,),On(18744,0,0,),On(18055,0,0,),On(15226,0,0,),On(16422,0,0,),On(18437,0,0,),On(9702,0,0,),On(16268,0,0,),On(9205,0,0,),On(7247,0,0,),On(17783,0,0,),On(5931,0,0,),On(12896,0,0,),On(7145,0,0,),On(7471,0,0,),On(5645,0,0,),On(9160,0,0,),On(12208,0,0,),On(9304,0,0,),On(1410,0,0,),On(10801,0,0,),On(14987,0,0,),On(15984,0,0,),On(8559,0,0,),On(6132,0,0,),On(12154,0,0,),On(0,1,0,),On(0,18340,3,),Back(0,48633,),On(0,11122,0,),On(15972,0,0,),On(5698,3038,0,),On(3129,6167,0,),On(8518,0,0,),On(4571,0,0,),On(17342,0,0,),Back(0,57980,),On(0,14218,0,),On(19699,0,0,),On(14462,6182,0,),On(0,6182,0,),Back(0,39506,),On(0,24673,0,),On(3654,331,0,),Back(0,65641,),On(0,15510,0,),On(5483,0,0,),On(14405,0,0,),Zero(6535,),On(16033,7147,0,),On(9537,0,0,),On(11632,0,0,),On(9202,0,0,),On(10219,0,0,),On(6735,0,0,),On(16070,0,0,),On(12340,0,0,),On(12973,0,0,),On(5492,0,0,),On(0,0,3,),];
    run_mixed_with(evs, true, true).unwrap();
}

/// A 100 s pause of the host (a VM frozen, a stop-the-world): the threads that read the clock before it deliver
/// after it, interleaved with new deliveries on time. Each stalled one is "at or after the entry before the jump"
/// (the on-time delivery just before it), so it is taken for a return from one time ahead: the on-time mark is
/// brought back to the stalled time, and expires at the next on-time delivery. The rate never fills.
#[test]
fn stalled_threads_after_a_pause_keep_the_rate() {
    let store = MemoryStore::default();
    assert!(store.count("s", T0));
    let mut passed = 0;
    // Real T0 + 100 s to T0 + 100.12 s: 60 stalled (stamped T0 + i ms) and 60 on time, interleaved.
    for i in 0..60 {
        if store.count("s", T0 + 100 * S + 2 * i) {
            passed += 1;
        }
        if store.count("s", T0 + 1 + i) {
            passed += 1;
        }
    }
    assert!(passed <= 59, "{passed} counted within 120 ms of real time");
}

/// A restart restoring the keys of a run that once stamped a key an hour ahead (local time for UTC once), newest
/// first: the first entry's own time is taken as the time before it, so the first delivery's step back runs from
/// the hour-ahead key and ages every restored key by the hour. The resend of an alert claimed 20 s before the
/// restart trades again. (Restored oldest first, the same keys are kept.)
#[test]
fn a_restored_key_ahead_restored_first_keeps_the_others() {
    let store = MemoryStore::default();
    store.restore_key("s", &[7u8; 32], T0 + 3_600 * S);
    store.restore_key("s", &[1u8; 32], T0);
    store.restore_key("s", &[2u8; 32], T0 - 10 * S);
    // Restarted, 20 s after the claim of key 1.
    let now = T0 + 20 * S;
    assert!(store.count("s", now));
    assert_eq!(store.claim("s", &[1u8; 32], now), Claim::Duplicate { log: true }, "claimed 20 s ago");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]
    /// Hours of deliveries, each a new key, with rare odd times: the windows' memory stays within its budget.
    #[test]
    fn memory_stays_bounded_with_odd_times(odd in proptest::collection::vec((0usize..20_000, prop_oneof![Just(0i64), Just(i64::MIN), Just(i64::MAX), Just(-1i64), 7_258_118_400_001i64..i64::MAX, 1i64..3_600_000, -3_600_000i64..-31_000]), 0..20)) {
        let store = MemoryStore::default();
        let mut max = 0;
        for i in 0..20_000usize {
            let real = T0 + i as i64 * 1_000;
            let now = match odd.iter().find(|(at, _)| *at == i) {
                Some((_, v)) if *v == 0 || *v == i64::MIN || *v == i64::MAX || *v == -1 || *v > 7_258_118_400_000 => *v,
                Some((_, d)) => real + d,
                None => real,
            };
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(i as u64).to_le_bytes());
            let _ = store.count("s", now);
            let _ = store.claim("s", &key, now);
            max = max.max(store.heap_bytes("s"));
        }
        prop_assert!(max <= 65_536, "{max} bytes");
    }
}

/// As one_time_ahead_then_a_slightly_stalled_delivery_keeps_the_keys, for the rate: a full window is let go.
#[test]
fn one_time_ahead_then_a_slightly_stalled_delivery_keeps_the_rate() {
    let limits = Limits { rate_limit: 5, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
    let store = MemoryStore::new(limits);
    for i in 0..4 {
        assert!(store.count("s", T0 + i * S));
    }
    // The outlier, an hour ahead (the fifth).
    assert!(store.count("s", T0 + 4 * S + 3_600 * S));
    // Real T0 + 6 s, read 4 s before: five counted in the last 6 s of real time.
    assert!(!store.count("s", T0 + 2 * S), "the sixth within 6 s");
}
