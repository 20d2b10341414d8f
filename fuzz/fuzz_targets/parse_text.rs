//! Plain-text alert parsing: any bytes sent as text/plain, or with no content type.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = strategy_webhook::alert::parse(data, Some("text/plain"));
    let _ = strategy_webhook::alert::parse(data, None);
});
