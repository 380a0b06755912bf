//! The one place that talks to the network: HTTP GET over rustls, verified against the
//! operating system's trust store, through `HTTPS_PROXY`/`ALL_PROXY` when set.
//!
//! Everything above this layer sees only [`Transport`], so tests feed bytes without a
//! network.

use std::io::Read;
use std::time::Duration;

use crate::HubError;

/// A response body being received.
pub(crate) struct Body {
    /// The bytes, streamed.
    pub reader: Box<dyn Read + Send>,
    /// `Content-Length`, when the server sent one.
    pub len: Option<u64>,
}

/// Fetches URLs. Implementations return [`HubError::HttpStatus`] for any status but 200.
pub(crate) trait Transport {
    fn get(&self, url: &str) -> Result<Body, HubError>;
}

/// The real transport: a `ureq` agent.
pub(crate) struct Http {
    agent: ureq::Agent,
}

impl Http {
    pub(crate) fn new() -> Self {
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            // The OS store, not a bundled root list: corporate proxies and sandboxes add
            // their CA there and nowhere else.
            .root_certs(ureq::tls::RootCerts::PlatformVerifier)
            .build();
        let agent = ureq::Agent::config_builder()
            .tls_config(tls)
            // The proxy comes from ALL_PROXY / HTTPS_PROXY / HTTP_PROXY (and NO_PROXY),
            // which is ureq's default; we only make status codes ours to report.
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .user_agent(concat!("kiln-hub/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Self { agent }
    }
}

impl Transport for Http {
    fn get(&self, url: &str) -> Result<Body, HubError> {
        let response = self.agent.get(url).call().map_err(|e| HubError::Network {
            url: url.to_string(),
            source: Box::new(e),
        })?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(HubError::HttpStatus {
                url: url.to_string(),
                status,
            });
        }
        let body = response.into_body();
        let len = body.content_length();
        Ok(Body {
            reader: Box::new(body.into_reader()),
            len,
        })
    }
}
