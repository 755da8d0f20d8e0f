//! Optional dense retrieval and reranking over HTTP, fused with the lexical ranking.

use std::sync::Arc;

use crate::fit::Caches;
use crate::index::DocIndex;

/// Dense retrieval and reranking settings of a pipeline.
pub struct Retrieval {}

impl Retrieval {
    /// Reorders the lexical order `units`.
    ///
    /// # Errors
    /// A warning for the trace when a service failed (the lexical order is kept).
    pub(crate) async fn reorder(
        &self,
        _message: &str,
        _units: &mut Vec<crate::fit::Unit>,
        _indexes: &[(usize, Arc<DocIndex>)],
        _texts: &[&str],
        _caches: &Caches,
    ) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
}
