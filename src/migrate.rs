//! Migration between gang API versions (1.35 `v1alpha1`, 1.36 `v1alpha2`, 1.37 and 1.38
//! `v1beta1`, CompositePodGroup at 1.37 `v1alpha3` and 1.38 `v1beta1`): the shapes of each
//! version and the minors they belong to ([`api`]), an order-keeping document tree ([`doc`])
//! and the manifest converter ([`convert`]) behind `gangscaler convert`. The compatibility webhook
//! uses [`api`] to link pods the way the cluster's version expects. Pure; depends on
//! [`crate::yaml`] only for reading.

pub mod api;
pub mod convert;
pub mod doc;

use doc::Node;

/// Why a manifest stream could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input is not valid YAML or breaks a parser limit.
    #[error("{source_name}")]
    Parse {
        /// The file name, or `-` for standard input.
        source_name: String,
        /// The parse error with its document number.
        #[source]
        error: crate::yaml::StreamError,
    },
    /// A converted document could not be written as YAML.
    #[error("writing document {document}: {message}")]
    Write {
        /// 1-based output document number.
        document: usize,
        /// The serializer's message.
        message: String,
    },
}

/// Reads a multi-document manifest stream, keeping the order of every mapping.
///
/// # Errors
/// [`Error::Parse`] naming `source_name` and the document.
pub fn parse(text: &str, source_name: &str) -> Result<Vec<convert::Input>, Error> {
    let docs = crate::yaml::documents_as::<Node>(text, &crate::yaml::OBJECTS).map_err(|error| {
        Error::Parse {
            source_name: source_name.to_owned(),
            error,
        }
    })?;
    Ok(docs
        .into_iter()
        .filter(|(_, node)| *node != Node::Null)
        .map(|(number, node)| convert::Input { number, node })
        .collect())
}

/// Writes documents as one YAML stream, `---` between them.
///
/// # Errors
/// [`Error::Write`] for a document the serializer refuses.
pub fn render(documents: &[Node]) -> Result<String, Error> {
    let mut out = String::new();
    for (i, doc) in documents.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let text = crate::yaml::to_string(doc).map_err(|e| Error::Write {
            document: i + 1,
            message: e.to_string(),
        })?;
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}
