//! Schwab: wire format (not yet written; see the broker issue).

use super::{Broker, Request};
use crate::order::{AssetClass, Order, OrderError};

/// Schwab's formatter.
pub struct Schwab;

impl Broker for Schwab {
    fn name(&self) -> &'static str {
        "schwab"
    }
    fn offers(&self, _asset_class: AssetClass) -> bool {
        true
    }
    fn replace_keeps_id(&self) -> bool {
        false
    }
    fn accepts_client_order_id(&self) -> bool {
        false
    }
    fn place(&self, _account_id: &str, _order: &Order) -> Result<Request, OrderError> {
        Err(OrderError::Unfillable("schwab orders are not formatted yet".into()))
    }
    fn replace(
        &self,
        _account_id: &str,
        _order_id: &str,
        _order: &Order,
        _quantity_changed: bool,
    ) -> Result<Request, OrderError> {
        Err(OrderError::Unfillable("schwab orders are not formatted yet".into()))
    }
    fn cancel(&self, _account_id: &str, _order_id: &str, _order: &Order) -> Result<Request, OrderError> {
        Err(OrderError::Unfillable("schwab orders are not formatted yet".into()))
    }
}
