//! A deploy's YAML layered as at start-up — declared config < the deploy < `BULKHEAD_…`
//! environment variables — shared by the watched file and the admin endpoint, and the
//! running config as a layer of its own (for a change to one bulkhead).

use crate::config::{Config, Layers};

/// The bottom layer when no declaration is given: no bulkheads, so a deploy declares each
/// bulkhead whole (kind and sizes).
const NO_DECLARATION: (&str, &str) = ("(no declared config)", "bulkheads: {}\n");

/// How a deploy's text becomes a config.
#[derive(Clone, Debug)]
pub(crate) struct DeployLayers {
    /// The declared config (a name for messages, and its YAML), if given.
    pub declared: Option<(String, String)>,
    /// Whether the process's `BULKHEAD_…` variables go on top.
    pub env: bool,
}

impl Default for DeployLayers {
    fn default() -> Self {
        DeployLayers {
            declared: None,
            env: true,
        }
    }
}

impl DeployLayers {
    /// `contents` (named `name` in messages) layered over the declaration, with the
    /// environment on top; the diagnostics, one per line, if it does not resolve.
    pub(crate) fn layered(&self, name: &str, contents: &str) -> Result<Config, String> {
        let (declared_name, declared_yaml) = match &self.declared {
            Some((name, yaml)) => (name.as_str(), yaml.as_str()),
            None => NO_DECLARATION,
        };
        let layers = Layers::new(declared_name, declared_yaml)
            .yaml(name, contents)
            .map_err(|d| d.to_string())?;
        let layers = if self.env { layers.env() } else { layers };
        layers.extract().map_err(|d| d.to_string())
    }
}
