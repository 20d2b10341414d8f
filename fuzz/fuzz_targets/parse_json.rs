//! JSON alert parsing: any bytes sent as application/json.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(alerts) = strategy_webhook::alert::parse(data, Some("application/json")) {
        // Whatever parses must render and parse back to itself.
        for a in &alerts {
            let json = a.to_json();
            let again = strategy_webhook::alert::parse(json.as_bytes(), Some("application/json"));
            assert_eq!(again.as_deref(), Ok(std::slice::from_ref(a)), "{json}");
        }
    }
});
