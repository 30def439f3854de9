//! Each provider's calibration (reported prompt tokens over estimated ones), shared by the turns
//! of every agent using it: a leaf module, so the shared state and the window fitting (fit.rs)
//! need not import each other.

use std::collections::HashMap;
use std::sync::Mutex;

use legio_core::Calibration;

/// Each provider's calibration, by provider name.
#[derive(Debug, Default)]
pub(crate) struct Calibrations(Mutex<HashMap<String, Calibration>>);

impl Calibrations {
    pub(crate) fn get(&self, provider: &str) -> Option<Calibration> {
        self.0.lock().ok()?.get(provider).copied()
    }

    pub(crate) fn set(&self, provider: &str, calibration: Calibration) {
        if let Ok(mut map) = self.0.lock() {
            map.entry(provider.to_owned()).or_insert(calibration);
        }
    }

    /// Learns from one request; the ratio before and after, if the sample was used.
    pub(crate) fn observe(
        &self,
        provider: &str,
        estimated: u64,
        reported: u64,
    ) -> Option<(f64, f64)> {
        let mut map = self.0.lock().ok()?;
        let c = map.get_mut(provider)?;
        let before = c.ratio;
        c.observe(estimated, reported).then_some((before, c.ratio))
    }
}
