//! A small geocoding client library whose calls go through bulkheads it declares itself,
//! in `bulkheads.yaml` beside its `Cargo.toml`.
//!
//! The application using it needs to know nothing about that to get sensible defaults;
//! to size them for its own traffic it installs a deploy config naming `geocoder` and
//! `tiles` (see the `library-app` example).

use std::thread;
use std::time::Duration;

use bulkhead::BulkheadError;

/// Why a lookup failed.
#[derive(Debug)]
pub enum GeoError {
    /// The library's bulkhead refused the call; nothing was sent to the geocoding service.
    Busy(BulkheadError),
}

impl From<BulkheadError> for GeoError {
    fn from(refused: BulkheadError) -> Self {
        GeoError::Busy(refused)
    }
}

impl std::fmt::Display for GeoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GeoError::Busy(refused) => write!(f, "geocoder busy: {refused}"),
        }
    }
}

impl std::error::Error for GeoError {}

/// Geocodes an address with a (simulated) blocking call to a geocoding service, on one of
/// the `geocoder` pool's worker threads.
#[bulkhead::bulkhead("geocoder")]
pub fn geocode(address: &str) -> Result<(f64, f64), GeoError> {
    thread::sleep(Duration::from_millis(100));
    let hash = address
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    Ok((f64::from(hash % 180) - 90.0, f64::from(hash % 360) - 180.0))
}

/// Fetches a map tile; at most `tiles.max_concurrent_calls` at once, on the caller's thread.
#[bulkhead::bulkhead("tiles")]
pub fn tile(zoom: u8, x: u32, y: u32) -> Result<Vec<u8>, GeoError> {
    thread::sleep(Duration::from_millis(20));
    Ok(vec![zoom, (x % 256) as u8, (y % 256) as u8])
}
