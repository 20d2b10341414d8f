//! # strategy-webhook
//!
//! Turns trading alerts into broker orders. A raw webhook body (JSON or plain text)
//! is parsed into canonical [`alert::Alert`]s, decided against a strategy snapshot,
//! built into orders for every bot of the strategy, and formatted in each bot's
//! broker's own wire format.
//!
//! The core does no I/O: no sockets, files, threads, environment or clock. The host
//! passes the time in as `now` (Unix milliseconds).
#![warn(missing_docs)]

pub mod alert;
pub mod broker;
pub mod decimal;
pub mod order;
pub mod strategy;
