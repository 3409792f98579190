//! The one error type of the `node` library.

use std::path::PathBuf;

/// What can stop a node. File errors name the file, the field or entry, and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A config, key or peer list file whose content is wrong.
    #[error("{}: {field}: {message}", path.display())]
    File {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// Parameters that cannot work together (e.g. degree ≥ number of virtual nodes).
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Models(#[from] models::ModelsError),
    #[error(transparent)]
    Sampling(#[from] sampling::Error),
    /// libp2p could not be set up (transport, listen address).
    #[error("network: {0}")]
    Network(String),
    /// The node reached no peer outside itself for its isolation timeout (`runtime/isolation.rs`).
    #[error("isolated: {0}")]
    Isolated(String),
    /// The node stopped before the operation completed.
    #[error("the node has stopped")]
    Stopped,
}

impl NodeError {
    pub(crate) fn file(
        path: &std::path::Path,
        field: impl Into<String>,
        message: impl ToString,
    ) -> Self {
        NodeError::File {
            path: path.to_path_buf(),
            field: field.into(),
            message: message.to_string(),
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        NodeError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Result type of this crate.
pub type Result<T, E = NodeError> = std::result::Result<T, E>;
