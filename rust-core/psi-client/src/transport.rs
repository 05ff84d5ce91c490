//! The transport: how requests reach the server. [`HttpTransport`] (ureq; HTTPS with
//! rustls, or plain HTTP to loopback) is the default; the platform SDKs implement [`Transport`] over OkHttp and URLSession
//! (docs/adr/0010-http-stack.md). A transport maps types only: every request carries
//! its absolute URL, headers, body and the limits ([`Request::timeout`],
//! [`Request::max_response_bytes`]) it must honour, so a platform transport needs no
//! copy of the client's configuration.
//!
//! Two rules hold for every transport, whatever its platform (docs/security.md §4,
//! docs/adr/0035-client-response-caps-and-redirects.md):
//! - **No redirects.** The API never redirects: a 3xx answer is returned as it is (the
//!   driver refuses it), never followed. Following one would let a server send the
//!   client's next requests (the token stays behind, the blinded messages do not) to
//!   another host, or from `https://` down to `http://`.
//! - **Small error bodies.** A response with an error status (400 and above) is read at
//!   most to [`MAX_ERROR_BODY_BYTES`] (or the request's cap, if lower): a longer error body
//!   is dropped and the status returned with an empty body.

#[cfg(feature = "http")]
use crate::error::ClientError;
use std::time::Duration;

/// Largest error body (status 400 and above) a transport reads: the API's JSON errors are
/// under 1 KB. A longer one is dropped, not failed: the status still tells the driver
/// what happened (a 503 stays retryable).
pub const MAX_ERROR_BODY_BYTES: u64 = 16 << 10;

pub use crate::error::TransportError;
pub use psi_http::Method;

/// One request, complete: a transport sends exactly this.
#[derive(Clone)]
pub struct Request {
    /// Method.
    pub method: Method,
    /// Absolute URL (`http://host:port/v1/...`).
    pub url: String,
    /// Headers (lower-case names). May include `authorization`: never log them.
    pub headers: Vec<(String, String)>,
    /// Body (empty for GET and DELETE).
    pub body: Vec<u8>,
    /// The whole exchange (connect, send, receive) must finish within this time, or
    /// fail with [`TransportError::timeout`] set.
    pub timeout: Duration,
    /// A response body longer than this must fail (not be truncated). The driver sets it
    /// per route: small for health and sessions, sized by the protocol for its steps,
    /// never above [`crate::ClientConfig::max_response_bytes`]. Error bodies have their
    /// own, smaller cap ([`MAX_ERROR_BODY_BYTES`]).
    pub max_response_bytes: u64,
    /// Whether a transport that can abandon requests may abandon this one when the run is
    /// cancelled. False for creating and deleting the session: the driver needs their
    /// outcome to free the server's session (a created session is deleted after the
    /// cancellation; an abandoned creation would leave it to the server's TTL).
    pub abandon_on_cancel: bool,
}

impl std::fmt::Debug for Request {
    // Headers hold the token and the body holds protocol messages: out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("body_len", &self.body.len())
            .field("timeout", &self.timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("abandon_on_cancel", &self.abandon_on_cancel)
            .finish_non_exhaustive()
    }
}

impl Request {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }
}

/// A response with any status: non-2xx statuses are not transport errors.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }
}

fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Moves one request to the server and its response back.
pub trait Transport: Send + Sync {
    /// Sends `request`; any HTTP status is a `Response`, only failures to get one are
    /// errors. Must honour `request.timeout` and `request.max_response_bytes`, follow no
    /// redirect (a 3xx is returned as a response) and read no more than
    /// [`MAX_ERROR_BODY_BYTES`] of an error body (see the module documentation).
    fn send(&self, request: Request) -> Result<Response, TransportError>;
}

/// The default transport, on `ureq` (sync; feature `http`, on by default): HTTPS through
/// rustls (ring provider, TLS 1.3 and 1.2) trusting Mozilla's root certificates
/// (webpki-roots) or, with [`HttpTransport::with_root_certificates`], only the given CAs;
/// plain HTTP where [`crate::Client::check_base_url`] allows it. The platform SDKs use
/// their own HTTP stack through [`Transport`] instead.
#[cfg(feature = "http")]
pub struct HttpTransport {
    agent: ureq::Agent,
}

#[cfg(feature = "http")]
impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTransport").finish_non_exhaustive()
    }
}

#[cfg(feature = "http")]
impl Default for HttpTransport {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "http")]
impl HttpTransport {
    /// A transport with a connection pool, trusting Mozilla's root certificates; limits
    /// come with each request.
    pub fn new() -> Self {
        Self::with_tls(ureq::tls::TlsConfig::default())
    }

    /// A transport that trusts only the CA certificates in `pem` (one or more PEM
    /// `CERTIFICATE` blocks): a private CA of a self-hosted server, or a test CA. Like
    /// curl's `--cacert`, they replace the built-in roots.
    pub fn with_root_certificates(pem: &[u8]) -> Result<Self, ClientError> {
        let bad = |m: &str| ClientError::BadInput(m.to_string());
        let mut roots = Vec::new();
        for item in ureq::tls::parse_pem(pem) {
            if let ureq::tls::PemItem::Certificate(c) =
                item.map_err(|_| bad("the CA file is not valid PEM"))?
            {
                roots.push(c);
            }
        }
        if roots.is_empty() {
            return Err(bad("the CA file holds no PEM certificate"));
        }
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::from(roots))
            .build();
        Ok(Self::with_tls(tls))
    }

    fn with_tls(tls: ureq::tls::TlsConfig) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // No redirect is followed (module documentation): a 3xx comes back as is.
            .max_redirects(0)
            .tls_config(tls)
            .build();
        HttpTransport {
            agent: config.into(),
        }
    }
}

/// ureq's error as a transport error: a timeout, a TLS failure (the handshake refused the
/// certificate, or the peer does not speak TLS: rustls reports both, inside an I/O error
/// once the handshake runs), or any other failure.
#[cfg(feature = "http")]
fn transport_error(e: ureq::Error) -> TransportError {
    let tls = match &e {
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::TlsRequired => true,
        ureq::Error::Io(io) => io
            .get_ref()
            .is_some_and(|inner| inner.is::<rustls::Error>()),
        _ => false,
    };
    let message = e.to_string();
    match e {
        ureq::Error::Timeout(_) => TransportError::timed_out(message),
        _ if tls => TransportError::tls_failed(message),
        _ => TransportError::failed(message),
    }
}

#[cfg(feature = "http")]
impl Transport for HttpTransport {
    fn send(&self, request: Request) -> Result<Response, TransportError> {
        let timeout = Some(request.timeout);
        let connect = Some(request.timeout.min(Duration::from_secs(10)));
        macro_rules! call {
            ($builder:expr, $send:ident $(, $body:expr)?) => {{
                let mut r = $builder
                    .config()
                    .timeout_global(timeout)
                    .timeout_connect(connect)
                    .build();
                for (k, v) in &request.headers {
                    r = r.header(k.as_str(), v.as_str());
                }
                r.$send($($body)?)
            }};
        }
        let url = request.url.as_str();
        let result = match request.method {
            Method::Get => call!(self.agent.get(url), call),
            Method::Delete => call!(self.agent.delete(url), call),
            Method::Post => call!(self.agent.post(url), send, &request.body[..]),
        };
        let mut resp = result.map_err(transport_error)?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let error = status >= 400;
        let limit = if error {
            request.max_response_bytes.min(MAX_ERROR_BODY_BYTES)
        } else {
            request.max_response_bytes
        };
        let body = match resp.body_mut().with_config().limit(limit).read_to_vec() {
            Ok(body) => body,
            // An oversized error body is dropped; its status still counts.
            Err(ureq::Error::BodyExceedsLimit(_)) if error => Vec::new(),
            Err(e) => return Err(transport_error(e)),
        };
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}
