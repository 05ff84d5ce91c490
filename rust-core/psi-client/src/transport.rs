//! The transport: how requests reach the server. [`HttpTransport`] (ureq, plain HTTP)
//! is the default; the mobile bindings will implement [`Transport`] over OkHttp and
//! URLSession instead (docs/adr/0010-http-client.md).

use std::time::Duration;

/// HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Method {
    /// GET
    Get,
    /// POST
    Post,
    /// DELETE
    Delete,
}

/// One request, relative to the server's base URL.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// Method.
    pub method: Method,
    /// Path starting with `/v1/`.
    pub path: &'a str,
    /// Headers (lower-case names).
    pub headers: Vec<(&'static str, String)>,
    /// Body (empty for GET and DELETE).
    pub body: &'a [u8],
}

/// A response with any status: non-2xx statuses are not transport errors.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers (names lower-case).
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The request did not produce a response (connection, timeout, I/O, size cap).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TransportError {
    /// What went wrong (no request or response bodies).
    pub message: String,
    /// True for a timeout.
    pub timeout: bool,
}

/// Moves one request to the server and its response back.
pub trait Transport: Send + Sync {
    /// Sends `request`; any HTTP status is a `Response`, only failures to get one are errors.
    fn send(&self, request: Request<'_>) -> Result<Response, TransportError>;
}

/// Plain-HTTP transport on `ureq` (sync). For loopback, tests and the CLI; put TLS in
/// front of the server (a reverse proxy) for real deployments, or use the platform's
/// HTTP stack through [`Transport`].
pub struct HttpTransport {
    agent: ureq::Agent,
    base: String,
    max_response_bytes: u64,
}

impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTransport")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl HttpTransport {
    /// A transport to `base_url` (e.g. `http://127.0.0.1:8080`) with an overall
    /// per-request `timeout` and a cap on response bodies.
    pub fn new(base_url: &str, timeout: Duration, max_response_bytes: u64) -> Self {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout.min(Duration::from_secs(10))))
            .http_status_as_error(false)
            .build();
        HttpTransport {
            agent: config.into(),
            base: base_url.trim_end_matches('/').to_string(),
            max_response_bytes,
        }
    }
}

fn transport_error(e: ureq::Error) -> TransportError {
    let timeout = matches!(e, ureq::Error::Timeout(_));
    TransportError {
        message: e.to_string(),
        timeout,
    }
}

impl Transport for HttpTransport {
    fn send(&self, request: Request<'_>) -> Result<Response, TransportError> {
        let url = format!("{}{}", self.base, request.path);
        let result = match request.method {
            Method::Get => {
                let mut r = self.agent.get(&url);
                for (k, v) in &request.headers {
                    r = r.header(*k, v);
                }
                r.call()
            }
            Method::Delete => {
                let mut r = self.agent.delete(&url);
                for (k, v) in &request.headers {
                    r = r.header(*k, v);
                }
                r.call()
            }
            Method::Post => {
                let mut r = self.agent.post(&url);
                for (k, v) in &request.headers {
                    r = r.header(*k, v);
                }
                r.send(request.body)
            }
        };
        let mut resp = result.map_err(transport_error)?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let body = resp
            .body_mut()
            .with_config()
            .limit(self.max_response_bytes)
            .read_to_vec()
            .map_err(transport_error)?;
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}
