//! Strategy snapshot loading: any bytes as a snapshot.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = strategy_webhook::Strategy::from_json(data);
});
