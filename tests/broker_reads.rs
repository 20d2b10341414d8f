//! Reading accounts back, across the five brokers, through the public API: the requests a
//! host sends are the ones each broker's fixtures were recorded for, every broker tells
//! the fixtures' shared story the same way, and every fixture is read by some test.

use std::path::{Path, PathBuf};
use strategy_webhook::broker::{BrokerId, Method};
use strategy_webhook::model::{AssetClass, Direction, Duration, OrderSide, OrderStatus, OrderType};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/brokers")
}

fn fixture(broker: BrokerId, file: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(broker.as_str()).join(file)).unwrap()
}

/// The recorded request path of `file`, from the broker's manifest.
fn manifest_path(broker: BrokerId, file: &str) -> String {
    let text = String::from_utf8(fixture(broker, "manifest.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let entry = v["fixtures"].as_array().unwrap().iter().find(|f| f["file"] == file).unwrap();
    assert_eq!(entry["method"], "GET", "{broker}/{file}");
    entry["path"].as_str().unwrap().to_string()
}

const ACCOUNTS: [(BrokerId, &str); 5] = [
    (BrokerId::Alpaca, ""),
    (BrokerId::Tradier, "VA12345678"),
    (BrokerId::Schwab, "8F3A2C1D9E7B6A5F4E3D2C1B0A9F8E7D6C5B4A39281706F5E4D3C2B1A0918273"),
    (BrokerId::Tastytrade, "5WT00001"),
    (BrokerId::Coinbase, ""),
];

#[test]
fn requests_are_the_recorded_ones() {
    for (id, account) in ACCOUNTS {
        let b = id.broker();
        let positions = b.positions_request(account).unwrap();
        assert_eq!(positions.method, Method::Get);
        assert_eq!(positions.path, manifest_path(id, "positions.json"), "{id}");
        let by_id = manifest_path(id, "order_by_id.json");
        let order_id = by_id.rsplit('/').next().unwrap().split('?').next().unwrap();
        assert_eq!(b.order_request(account, order_id).unwrap().path, by_id, "{id}");
        let recorded = manifest_path(id, "orders_open.json");
        if id != BrokerId::Schwab {
            assert_eq!(b.open_orders_request(account, 0).unwrap().path, recorded, "{id}");
        }
    }
}

#[test]
fn every_broker_tells_the_same_story() {
    for (id, _) in ACCOUNTS {
        let b = id.broker();
        let positions = b.parse_positions(&fixture(id, "positions.json")).unwrap();
        assert!(positions.iter().all(|p| p.quantity > strategy_webhook::decimal::Decimal::ZERO), "{id}");
        if id != BrokerId::Coinbase {
            let held = |symbol: &str| {
                positions
                    .iter()
                    .find(|p| p.instrument == symbol && p.asset_class == AssetClass::Equity)
                    .map(|p| (p.direction, p.quantity.to_string()))
            };
            assert_eq!(held("AAPL"), Some((Direction::Long, "10".into())), "{id}");
            assert_eq!(held("TSLA"), Some((Direction::Short, "15".into())), "{id}");
            let options: Vec<_> = positions.iter().filter(|p| p.asset_class == AssetClass::Option).collect();
            assert_eq!(options.len(), 2, "{id}");
            assert!(options.iter().all(|p| p.contract.is_some()), "{id}: options read as contracts");
        }
        let orders = b.parse_orders(&fixture(id, "orders_open.json")).unwrap();
        assert!(orders.iter().all(|o| o.status != OrderStatus::Unknown), "{id}: every status word is known");
        assert!(
            orders.iter().any(|o| o.filled_quantity > strategy_webhook::decimal::Decimal::ZERO),
            "{id}: a partial fill"
        );
        for (file, status) in [
            ("order_filled.json", OrderStatus::Filled),
            ("order_cancelled.json", OrderStatus::Cancelled),
            ("order_rejected.json", OrderStatus::Rejected),
        ] {
            assert_eq!(b.parse_order(&fixture(id, file)).unwrap().status, status, "{id}/{file}");
        }
    }
}

#[test]
fn only_coinbase_publishes_increments() {
    let pair = strategy_webhook::model::CryptoPair { base: "BTC".into(), quote: "USD".into() };
    for (id, _) in ACCOUNTS {
        assert_eq!(id.broker().product_request(&pair).is_some(), id == BrokerId::Coinbase, "{id}");
    }
}

#[test]
fn tradier_working_orders_are_read_page_after_page() {
    // Tradier pages its order list (25 a page unless `limit` asks for more): a page as long as
    // the request's page size is not the whole list, or the orders past it vanish from the sync.
    let b = BrokerId::Tradier.broker();
    let first = b.open_orders_request("VA12345678", 0).unwrap();
    let param = |path: &str, k: &str| {
        path.split(['?', '&']).find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse::<usize>().ok())
    };
    let size = param(&first.path, "limit").unwrap_or(25);
    let one: serde_json::Value = serde_json::from_slice(&fixture(BrokerId::Tradier, "orders_open_one.json")).unwrap();
    let page = |n: usize| {
        let v = vec![one["orders"]["order"].clone(); n];
        serde_json::to_vec(&serde_json::json!({ "orders": { "order": v } })).unwrap()
    };
    let full = page(size);
    assert!(b.parse_orders(&full).is_err(), "a full page is not read as the whole list");
    let (orders, next) = b.parse_orders_page(&first, &full).unwrap();
    assert_eq!(orders.len(), size);
    let next = next.expect("a full page has a next one");
    assert_eq!(param(&next.path, "page"), Some(2), "{}", next.path);
    assert_eq!(param(&next.path, "limit"), Some(size), "{}", next.path);
    // A page cut at Tradier's documented default (25) may have more behind it too (the documentation gives no
    // maximum for `limit`); only a page shorter than that ends the list.
    let (orders, more) = b.parse_orders_page(&next, &page(25)).unwrap();
    assert_eq!((orders.len(), more.and_then(|r| param(&r.path, "page"))), (25, Some(3)));
    let (orders, last) = b.parse_orders_page(&next, &page(24)).unwrap();
    assert_eq!((orders.len(), last), (24, None));
    // Brokers that do not page answer the whole list at once; Coinbase's OPEN orders are followed by the other
    // working statuses (it refuses OPEN paired with another), whose answer ends the list.
    for (id, account) in ACCOUNTS {
        let req = id.broker().open_orders_request(account, 0).unwrap();
        let (_, next) = id.broker().parse_orders_page(&req, &fixture(id, "orders_open.json")).unwrap();
        match (id, next) {
            (BrokerId::Coinbase, Some(queued)) => {
                let (_, end) = id.broker().parse_orders_page(&queued, &fixture(id, "orders_open.json")).unwrap();
                assert_eq!(end, None, "{id}");
            }
            (_, next) => assert_eq!(next, None, "{id}"),
        }
    }
}

/// Files for the sessions the server keeps (OAuth tokens, JWTs): the core reads none of them.
const SESSION_FILES: [&str; 4] = ["oauth_token.json", "oauth_refresh_expired.json", "jwt.md", "jwt_example.json"];

#[test]
fn every_fixture_is_read_by_a_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (id, _) in ACCOUNTS {
        let source = std::fs::read_to_string(root.join("src/broker").join(format!("{id}.rs"))).unwrap();
        let mut files: Vec<String> = std::fs::read_dir(fixtures().join(id.as_str()))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| !matches!(f.as_str(), "README.md" | "manifest.json") && !SESSION_FILES.contains(&f.as_str()))
            .collect();
        files.sort();
        let unread: Vec<_> = files.iter().filter(|f| !source.contains(&format!("fixture!(\"{f}\")"))).collect();
        assert!(unread.is_empty(), "{id}: no test reads {unread:?}");
    }
}

/// An order whose answer gives no count (a trader's order sized in dollars, `qty: null`, `quote_size`, a Notional
/// Market order's `value`; or an answer missing its size) was read as a working order of 0: a bot's state cannot
/// hold one (the strategy refuses a working order of zero, and with it the whole state), and a MODIFY of it was
/// sized from 0. Every order fixture of every broker, with every field that states its size taken out, reads as
/// no working order of 0, as an error, or as an order that says why its count is not known.
#[test]
fn an_order_without_its_size_is_never_a_working_order_of_zero() {
    /// The fields the brokers state an order's (or its legs') size in.
    const SIZES: [&str; 4] = ["qty", "quantity", "size", "base_size"];
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.retain(|k, _| !SIZES.contains(&k.as_str()));
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut read = 0;
    for (id, _) in ACCOUNTS {
        let b = id.broker();
        for entry in std::fs::read_dir(fixtures().join(id.as_str())).unwrap() {
            let file = entry.unwrap().file_name().to_string_lossy().into_owned();
            if !file.starts_with("order") {
                continue;
            }
            let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&fixture(id, &file)) else { continue };
            strip(&mut v);
            let body = serde_json::to_vec(&v).unwrap();
            let orders = b.parse_orders(&body).into_iter().flatten().chain(b.parse_order(&body));
            for o in orders {
                read += 1;
                assert!(
                    !(o.status == OrderStatus::Working && o.quantity.is_zero()),
                    "{id}/{file}: order {} read as a working order of 0",
                    o.order_id
                );
                if o.status == OrderStatus::Unknown {
                    assert!(o.reason.is_some(), "{id}/{file}: order {} is unknown with no reason", o.order_id);
                }
            }
        }
    }
    assert!(read > 20, "the orders were read ({read})");
}

/// Every numeric value of `v` (a number, or a string that reads as one), in document order, as a path of keys
/// and indexes.
fn numeric_leaves(v: &serde_json::Value, path: &mut Vec<serde_json::Value>, out: &mut Vec<Vec<serde_json::Value>>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                path.push(k.as_str().into());
                numeric_leaves(x, path, out);
                path.pop();
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(i.into());
                numeric_leaves(x, path, out);
                path.pop();
            }
        }
        serde_json::Value::Number(_) => out.push(path.clone()),
        serde_json::Value::String(s) if s.trim().parse::<f64>().is_ok() => out.push(path.clone()),
        _ => {}
    }
}

fn set_leaf(v: &mut serde_json::Value, path: &[serde_json::Value], to: &str) {
    let mut at = v;
    for p in path {
        at = match p {
            serde_json::Value::String(k) => &mut at[k.as_str()],
            serde_json::Value::Number(i) => &mut at[i.as_u64().unwrap() as usize],
            _ => unreachable!(),
        };
    }
    // Kept as the broker wrote it: a string stays a string, a number a number.
    *at = if at.is_string() { to.into() } else { serde_json::from_str(to).unwrap() };
}

/// A broker's answer with quantities at the edge of what a decimal holds (two fields of one record at once, one
/// or both negative: a leg's quantity and its remaining quantity, a position's long and short quantities, a
/// wallet's available balance and hold) is read or refused, never a panic: a reader that panicked ended the
/// server's dispatcher or sync task of that bot for good, with no word, its orders never sent again.
#[test]
fn quantities_at_a_decimals_edge_are_read_or_refused_never_a_panic() {
    // Each at most a decimal's largest (7.9e28), two of them past it.
    const EDGE: [&str; 2] = ["50000000000000000000000000000", "-50000000000000000000000000000"];
    // Fields of one record lie within a few leaves of each other in document order.
    const NEAR: usize = 10;
    for (id, _) in ACCOUNTS {
        let b = id.broker();
        for entry in std::fs::read_dir(fixtures().join(id.as_str())).unwrap() {
            let file = entry.unwrap().file_name().to_string_lossy().into_owned();
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&fixture(id, &file)) else { continue };
            let mut leaves = Vec::new();
            numeric_leaves(&v, &mut Vec::new(), &mut leaves);
            for i in 0..leaves.len() {
                for j in i..leaves.len().min(i + NEAR) {
                    for (x, y) in [(0, 0), (0, 1), (1, 0)] {
                        let mut m = v.clone();
                        set_leaf(&mut m, &leaves[i], EDGE[x]);
                        if j != i {
                            set_leaf(&mut m, &leaves[j], EDGE[y]);
                        }
                        let body = serde_json::to_vec(&m).unwrap();
                        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            let _ = b.parse_positions(&body);
                            let _ = b.parse_orders(&body);
                            let _ = b.parse_order(&body);
                            let _ = b.parse_product(&body);
                        }));
                        assert!(
                            read.is_ok(),
                            "{id}/{file}: {:?} = {}, {:?} = {}",
                            leaves[i],
                            EDGE[x],
                            leaves[j],
                            EDGE[y]
                        );
                    }
                }
            }
        }
    }
}

/// An order answer nesting `leg` (Tradier) or `legs` (Alpaca) a thousand deep overflowed the stack of a 2 MiB
/// thread (tokio's worker default): each level was read by a deserializer of its own, whose nesting limit
/// started afresh, and a stack overflow aborts the process, every bot with it. Refused now, as an answer that
/// could not be read; real answers, with a leg or two, read as before (the fixtures above).
#[test]
fn deeply_nested_legs_are_refused_not_a_stack_overflow() {
    fn nested(depth: usize, open: &str, key: &str) -> String {
        let mut s = String::from(open);
        for _ in 0..depth {
            s.push_str(&format!(r#"{{"id":"1","{key}":"#));
        }
        s.push_str("null");
        s.push_str(&"}".repeat(depth));
        s
    }
    let tradier = nested(1000, r#"{"order":"#, "leg") + "}";
    let alpaca = nested(1000, "", "legs");
    let read = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            (
                BrokerId::Tradier.broker().parse_order(tradier.as_bytes()).map(|o| o.status),
                BrokerId::Alpaca.broker().parse_order(alpaca.as_bytes()).map(|o| o.status),
            )
        })
        .unwrap()
        .join()
        .unwrap();
    for r in [read.0, read.1] {
        let e = r.expect_err("a thousand levels of legs are no order");
        assert!(e.to_string().contains("nested more than 32 levels"), "{e}");
    }
    // Brackets inside strings are text, not nesting.
    let quoted =
        format!(r#"{{"order":{{"id":"1","status":"open","leg":[{{"id":"2","tag":"{}"}}]}}}}"#, "[{".repeat(50));
    let e = BrokerId::Tradier.broker().parse_order(quoted.as_bytes()).err().map(|e| e.to_string());
    assert!(!e.unwrap_or_default().contains("nested"), "brackets in a string were counted");
}

/// A stablecoin is a coin Coinbase lists as a pair's base (USDT-USD, USDC-EUR): its wallet was left out of the
/// positions read, so a USDT/USD strategy was always flat and its CLOSE found nothing. Fiat wallets stay out.
#[test]
fn a_coinbase_stablecoin_wallet_is_a_position_and_fiat_is_not() {
    let body = br#"{"accounts":[
        {"currency":"USDT","type":"ACCOUNT_TYPE_CRYPTO","available_balance":{"value":"2500","currency":"USDT"},"hold":{"value":"0","currency":"USDT"}},
        {"currency":"USD","type":"ACCOUNT_TYPE_FIAT","available_balance":{"value":"100","currency":"USD"},"hold":{"value":"0","currency":"USD"}},
        {"currency":"USD","type":"","available_balance":{"value":"100","currency":"USD"},"hold":{"value":"0","currency":"USD"}}],
        "has_next":false,"cursor":""}"#;
    let p = BrokerId::Coinbase.broker().parse_positions(body).unwrap();
    let held: Vec<(&str, String)> = p.iter().map(|p| (p.instrument.as_str(), p.quantity.to_string())).collect();
    assert_eq!(held, [("USDT", "2500".to_owned())]);
}

/// Alpaca's working-order read asks `nested=true`, which (research-brokers-reads.md §1.3) "rolls multi-leg /
/// bracket children into `legs`". A bracket placed by hand whose entry filled: its take-profit (a working limit
/// sell of the whole position) is only in the parent's `legs`.
/// A time in force of the broker's own (Alpaca's `opg`, Tradier's `pre`, Schwab's end of week, Tastytrade's
/// `GTC Ext`, Coinbase's good-till-date) is read as none of the library's: the server lists it as `other`, which a
/// MODIFY refuses to re-send. Stored as `day`, a GTC Ext take-profit moved by a MODIFY went out as a day order and
/// expired that night.
#[test]
fn a_time_in_force_of_the_brokers_own_is_read_as_none_of_the_librarys() {
    for (id, gtc, own) in [
        (BrokerId::Alpaca, r#""time_in_force": "gtc""#, r#""time_in_force": "opg""#),
        (BrokerId::Tradier, r#""duration": "gtc""#, r#""duration": "pre""#),
        (BrokerId::Schwab, r#""duration": "GOOD_TILL_CANCEL""#, r#""duration": "END_OF_WEEK""#),
        (BrokerId::Tastytrade, r#""time-in-force": "GTC""#, r#""time-in-force": "GTC Ext""#),
        (BrokerId::Coinbase, r#""limit_limit_gtc""#, r#""limit_limit_gtd""#),
    ] {
        let b = id.broker();
        let listed = String::from_utf8(fixture(id, "orders_open.json")).unwrap();
        assert!(listed.contains(gtc), "{id}: the fixture lists a GTC order");
        let gtc_ids = |text: &str, duration| {
            let orders = b.parse_orders(text.as_bytes()).unwrap();
            let ids: Vec<String> = orders.into_iter().filter(|o| o.duration == duration).map(|o| o.order_id).collect();
            ids
        };
        let was = gtc_ids(&listed, Some(Duration::Gtc));
        assert!(!was.is_empty(), "{id}");
        let own = listed.replace(gtc, own);
        assert_eq!(gtc_ids(&own, None), was, "{id}: its own time in force is none of the library's");
        assert!(gtc_ids(&own, Some(Duration::Gtc)).is_empty(), "{id}");
    }
    // Schwab keeps extended hours in `session`: a GTC or DAY order in an extended session is no order of the
    // library's (read as GTC, a MODIFY re-sent a seamless exit in the NORMAL session).
    let b = BrokerId::Schwab.broker();
    let listed = String::from_utf8(fixture(BrokerId::Schwab, "orders_open.json")).unwrap();
    let known = |text: &str| b.parse_orders(text.as_bytes()).unwrap().iter().filter(|o| o.duration.is_some()).count();
    assert!(known(&listed) > 0);
    for session in ["SEAMLESS", "AM", "PM"] {
        let own = listed.replace(r#""session": "NORMAL""#, &format!(r#""session": "{session}""#));
        assert_eq!(known(&own), 0, "{session}");
    }
    // Nor is it ever ours when an uncertain send is looked up by its terms: read with no time in force, a
    // SEAMLESS GTC order agreed with our DAY order of the same terms (taken for it, ours recorded as placed).
    let ours: strategy_webhook::model::Order = serde_json::from_str(
        r#"{"asset_class":"equity","symbol":"AAPL","intent":"open_long","quantity":10,"order_type":"limit",
            "limit_price":185,"duration":"day","legs":[],"client_order_id":"swh-1"}"#,
    )
    .unwrap();
    let first = |t: &str| b.parse_orders(t.as_bytes()).unwrap().into_iter().next().unwrap();
    assert!(first(&listed).matches(&ours));
    let gtc = listed.replacen(r#""duration": "DAY""#, r#""duration": "GOOD_TILL_CANCEL""#, 1);
    assert!(!first(&gtc).matches(&ours), "a NORMAL GTC order is not our DAY order");
    let seamless = gtc.replacen(r#""session": "NORMAL""#, r#""session": "SEAMLESS""#, 1);
    assert!(!first(&seamless).matches(&ours), "a SEAMLESS order is never ours");
    let seamless_day = listed.replacen(r#""session": "NORMAL""#, r#""session": "SEAMLESS""#, 1);
    assert!(!first(&seamless_day).matches(&ours), "a SEAMLESS DAY order is never ours");
}

#[test]
fn alpaca_bracket_take_profit_nested_in_legs_is_read_as_a_working_order() {
    let b = BrokerId::Alpaca.broker();
    let req = b.open_orders_request("", 0).unwrap();
    assert!(req.path.contains("nested=true"), "{}", req.path);
    let body = br#"[{"id":"p1","client_order_id":"hand-1","created_at":"2026-03-03T14:00:00Z","submitted_at":"2026-03-03T14:00:00Z",
      "symbol":"AAPL","asset_class":"us_equity","qty":"10","filled_qty":"10","order_class":"bracket","type":"market",
      "side":"buy","time_in_force":"gtc","status":"filled",
      "legs":[
        {"id":"tp1","client_order_id":"hand-1-tp","created_at":"2026-03-03T14:00:00Z","submitted_at":"2026-03-03T14:00:01Z",
         "symbol":"AAPL","asset_class":"us_equity","qty":"10","filled_qty":"0","order_class":"bracket","type":"limit",
         "side":"sell","time_in_force":"gtc","limit_price":"200","status":"new","legs":null},
        {"id":"sl1","client_order_id":"hand-1-sl","created_at":"2026-03-03T14:00:00Z","submitted_at":"2026-03-03T14:00:01Z",
         "symbol":"AAPL","asset_class":"us_equity","qty":"10","filled_qty":"0","order_class":"bracket","type":"stop",
         "side":"sell","time_in_force":"gtc","stop_price":"180","status":"held","legs":null}]}]"#;
    let (orders, next) = b.parse_orders_page(&req, body).unwrap();
    assert!(next.is_none());
    let working_limit_sells: Vec<_> = orders
        .iter()
        .filter(|o| !o.status.is_final() && o.order_type == Some(OrderType::Limit) && o.side == Some(OrderSide::Sell))
        .collect();
    assert_eq!(
        working_limit_sells.len(),
        1,
        "the take-profit working at the broker is missing from the read: {:?}",
        orders.iter().map(|o| (&o.order_id, o.status, o.order_type, o.side)).collect::<Vec<_>>()
    );
}

/// Tradier's OCO (class "oco"): two equity legs (a limit sell and a stop sell), read as an option spread.
#[test]
fn tradier_oco_of_shares_is_read_as_shares() {
    let b = BrokerId::Tradier.broker();
    let req = b.open_orders_request("VA12345678", 0).unwrap();
    let body = br#"{"orders":{"order":[{"id":555,"type":"limit","symbol":"AAPL","side":"sell","quantity":10.0,
      "status":"open","duration":"gtc","class":"oco","num_legs":2,"create_date":"2026-03-03T14:00:00.000Z",
      "leg":[
        {"id":556,"type":"limit","symbol":"AAPL","side":"sell","quantity":10.0,"status":"open","duration":"gtc",
         "price":200.0,"exec_quantity":0.0,"class":"equity"},
        {"id":557,"type":"stop","symbol":"AAPL","side":"sell","quantity":10.0,"status":"open","duration":"gtc",
         "stop_price":180.0,"exec_quantity":0.0,"class":"equity"}]}]}}"#;
    let (orders, _) = b.parse_orders_page(&req, body).unwrap();
    let summary: Vec<_> =
        orders.iter().map(|o| (o.order_id.clone(), o.asset_class, o.status, o.order_type, o.side)).collect();
    assert!(
        orders.iter().any(|o| o.asset_class == AssetClass::Equity
            && o.status == OrderStatus::Working
            && o.order_type == Some(OrderType::Limit)
            && o.side == Some(OrderSide::Sell)),
        "the OCO's limit sell of 10 AAPL is not read as a working equity exit: {summary:?}"
    );
}

/// Schwab's OCO: the parent holds no legs, its two orders are in `childOrderStrategies`.
#[test]
fn schwab_oco_children_are_read() {
    let b = BrokerId::Schwab.broker();
    let req = b.open_orders_request("ABC", 1_772_550_000_000).unwrap();
    let body = br#"[{"orderStrategyType":"OCO","orderId":900,"status":"WORKING","enteredTime":"2026-03-03T14:00:00+0000",
      "childOrderStrategies":[
        {"orderStrategyType":"SINGLE","orderId":901,"status":"WORKING","orderType":"LIMIT","duration":"GOOD_TILL_CANCEL",
         "quantity":10.0,"filledQuantity":0.0,"price":200.0,"enteredTime":"2026-03-03T14:00:00+0000",
         "orderLegCollection":[{"instruction":"SELL","quantity":10.0,"instrument":{"assetType":"EQUITY","symbol":"AAPL"}}]},
        {"orderStrategyType":"SINGLE","orderId":902,"status":"WORKING","orderType":"STOP","duration":"GOOD_TILL_CANCEL",
         "quantity":10.0,"filledQuantity":0.0,"stopPrice":180.0,"enteredTime":"2026-03-03T14:00:00+0000",
         "orderLegCollection":[{"instruction":"SELL","quantity":10.0,"instrument":{"assetType":"EQUITY","symbol":"AAPL"}}]}]}]"#;
    let (orders, _) = b.parse_orders_page(&req, body).unwrap();
    let summary: Vec<_> =
        orders.iter().map(|o| (o.order_id.clone(), o.instrument.clone(), o.status, o.order_type, o.side)).collect();
    assert!(
        orders.iter().any(|o| o.order_id == "901" && o.order_type == Some(OrderType::Limit)),
        "the OCO's limit sell is not read: {summary:?}"
    );
}
