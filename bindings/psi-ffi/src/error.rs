//! The one error of the bindings: each variant says what the app can do. Converted from
//! psi-client's error in one place ([`From<ClientError>`]). Messages never contain
//! contact data, labels or keys.

use psi_client::{ClientError, ErrorCode};

/// Why a call failed.
#[derive(Debug, thiserror::Error, uniffi::Error)]
#[non_exhaustive]
pub enum PsiError {
    /// The caller's input or settings cannot be used (too many contacts
    /// for this server, unknown region, a bad URL or timeout). Fix the input; retrying
    /// the same call fails the same way.
    #[error("invalid input: {reason}")]
    InvalidInput {
        /// What is wrong (never the contact itself).
        reason: String,
    },
    /// No response from the server: connection refused or reset, timeout, response too
    /// large. Retrying later may help.
    #[error("network error: {reason}")]
    Network {
        /// What went wrong.
        reason: String,
        /// True when a timeout expired.
        timeout: bool,
    },
    /// The server refused the token (missing or not accepted).
    #[error("unauthorized: {reason}")]
    Unauthorized {
        /// The server's explanation.
        reason: String,
    },
    /// The server's limits are reached for this caller (items per hour) or for everyone
    /// (too many sessions). Retry after `retry_after_secs`, if given.
    #[error("rate limited: {reason}")]
    RateLimited {
        /// The server's explanation.
        reason: String,
        /// Seconds to wait, from the server's `Retry-After`.
        retry_after_secs: Option<u64>,
    },
    /// The server answered with another error.
    #[error("server error {status} ({code:?}): {reason}")]
    Server {
        /// HTTP status.
        status: u16,
        /// The API error code (docs/api.md, "Errors").
        code: ServerErrorCode,
        /// The server's explanation.
        reason: String,
        /// True if the same call may succeed later (key rotated, session expired, server
        /// bug or overload).
        retryable: bool,
    },
    /// The server's answer broke the protocol or the API (malformed message, wrong
    /// epoch, unexpected response). `retryable` is true when the registry changed
    /// during the run.
    #[error("protocol error: {reason}")]
    Protocol {
        /// What was wrong.
        reason: String,
        /// True if a new run may succeed.
        retryable: bool,
    },
    /// The run was cancelled; its server session was deleted.
    #[error("cancelled")]
    Cancelled,
    /// A bug in the SDK (a panic in the native library was caught). Please report it.
    #[error("internal error: {reason}")]
    Internal {
        /// What failed (no payload of the panic, which could hold data).
        reason: String,
    },
    // New variants go last: a variant's number is its place (the generated bindings'
    // wire form), and older SDK code maps the earlier ones by number.
    /// The secure connection to the server could not be set up: its certificate is not
    /// trusted (expired, for another name, an unknown CA, a network intercepting the
    /// connection) or it does not speak TLS (an `https://` URL to a plain HTTP port).
    /// Not retryable: fix the URL, the server's certificate or the trusted roots.
    #[error("TLS failed: {reason}")]
    Tls {
        /// What went wrong (the transport's message).
        reason: String,
    },
}

impl PsiError {
    pub(crate) fn internal(reason: impl Into<String>) -> PsiError {
        PsiError::Internal {
            reason: reason.into(),
        }
    }
}

/// `e`'s message followed by each cause in its `source()` chain whose text it does not
/// already hold (`a: b`). psi-client's errors and their causes are log-safe.
fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !t.is_empty() && !text.contains(&t) {
            text = format!("{text}: {t}");
        }
        cause = c.source();
    }
    text
}

/// The API's error codes (docs/api.md, "Errors"), as psi-http's `ErrorCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
#[allow(missing_docs)] // Documented on psi_http::ErrorCode.
pub enum ServerErrorCode {
    BadRequest,
    InvalidMessage,
    CountMismatch,
    TooManyItems,
    UnsupportedProtocol,
    MissingToken,
    InvalidToken,
    NotFound,
    UnknownSession,
    MethodNotAllowed,
    RequestTimeout,
    WrongPhase,
    EpochMismatch,
    SessionExpired,
    BodyTooLarge,
    UnsupportedMediaType,
    RateLimited,
    Internal,
    TooManySessions,
    /// A code these bindings do not know (a newer server).
    Unknown,
}

impl From<ErrorCode> for ServerErrorCode {
    fn from(c: ErrorCode) -> Self {
        match c {
            ErrorCode::BadRequest => ServerErrorCode::BadRequest,
            ErrorCode::InvalidMessage => ServerErrorCode::InvalidMessage,
            ErrorCode::CountMismatch => ServerErrorCode::CountMismatch,
            ErrorCode::TooManyItems => ServerErrorCode::TooManyItems,
            ErrorCode::UnsupportedProtocol => ServerErrorCode::UnsupportedProtocol,
            ErrorCode::MissingToken => ServerErrorCode::MissingToken,
            ErrorCode::InvalidToken => ServerErrorCode::InvalidToken,
            ErrorCode::NotFound => ServerErrorCode::NotFound,
            ErrorCode::UnknownSession => ServerErrorCode::UnknownSession,
            ErrorCode::MethodNotAllowed => ServerErrorCode::MethodNotAllowed,
            ErrorCode::RequestTimeout => ServerErrorCode::RequestTimeout,
            // A session ended after its third refused step is, to these bindings' callers,
            // a session that takes no more steps (a new variant would break exhaustive
            // matches in the Kotlin and Swift SDKs); the reference client never gets it.
            ErrorCode::WrongPhase | ErrorCode::SessionFailed => ServerErrorCode::WrongPhase,
            ErrorCode::EpochMismatch => ServerErrorCode::EpochMismatch,
            // A session held by another instance is, to these bindings' callers, a
            // session gone from where they reach it: start a new one (retryable, as an
            // expiry). A new variant would break exhaustive matches in the Kotlin and
            // Swift SDKs; `PsiError::Server::status` still tells 421 from 410.
            ErrorCode::SessionExpired | ErrorCode::WrongInstance => ServerErrorCode::SessionExpired,
            ErrorCode::BodyTooLarge => ServerErrorCode::BodyTooLarge,
            ErrorCode::UnsupportedMediaType => ServerErrorCode::UnsupportedMediaType,
            ErrorCode::RateLimited => ServerErrorCode::RateLimited,
            ErrorCode::Internal => ServerErrorCode::Internal,
            // OT capacity is a session limit to these bindings' callers (a new variant
            // would break exhaustive matches in the Kotlin SDK); an automatic run has
            // already fallen back to DH-PSI before it reaches them.
            // A server whose shared database is away is, to these bindings' callers, a
            // busy server: come back after Retry-After (a new variant would break
            // exhaustive matches in the Kotlin and Swift SDKs; `status` is 503 for both).
            ErrorCode::TooManySessions | ErrorCode::OtCapacity | ErrorCode::StoreUnavailable => {
                ServerErrorCode::TooManySessions
            }
            // The group relay's codes (docs/adr/0051-group-relay.md): these bindings have no
            // group API yet, so no call of theirs can receive one; named here so that each
            // new code is a decision, not the default arm. The group API's FFI will give
            // them their own variants (a change the Kotlin and Swift SDKs must map).
            ErrorCode::UnknownGroup
            | ErrorCode::InvalidParty
            | ErrorCode::GroupFull
            | ErrorCode::GroupClosed
            | ErrorCode::MailboxFull
            | ErrorCode::GroupExpired
            | ErrorCode::TooManyGroups => ServerErrorCode::Unknown,
            _ => ServerErrorCode::Unknown,
        }
    }
}

impl From<ClientError> for PsiError {
    fn from(e: ClientError) -> Self {
        let retryable = e.is_retryable();
        let reason = with_causes(&e);
        match e {
            // The transport's own message: the cause.
            ClientError::Network {
                message, timeout, ..
            } => PsiError::Network {
                reason: message,
                timeout,
            },
            ClientError::Tls { message, .. } => PsiError::Tls { reason: message },
            ClientError::Http {
                status,
                code,
                message,
                retry_after,
            } => match code {
                ErrorCode::MissingToken | ErrorCode::InvalidToken => {
                    PsiError::Unauthorized { reason: message }
                }
                ErrorCode::RateLimited
                | ErrorCode::TooManySessions
                | ErrorCode::OtCapacity
                | ErrorCode::StoreUnavailable => PsiError::RateLimited {
                    reason: message,
                    retry_after_secs: retry_after,
                },
                ErrorCode::TooManyItems => PsiError::InvalidInput { reason: message },
                code => PsiError::Server {
                    status,
                    code: code.into(),
                    reason: message,
                    retryable,
                },
            },
            ClientError::Protocol(_) | ClientError::BadResponse(_) => {
                PsiError::Protocol { reason, retryable }
            }
            ClientError::BadInput(reason) => PsiError::InvalidInput { reason },
            ClientError::InsecureUrl { .. } => PsiError::InvalidInput { reason },
            ClientError::Cancelled => PsiError::Cancelled,
            _ => PsiError::Internal { reason },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(code: ErrorCode, retry_after: Option<u64>) -> PsiError {
        ClientError::Http {
            status: code.status(),
            code,
            message: "m".into(),
            retry_after,
        }
        .into()
    }

    #[test]
    fn each_client_error_maps_to_what_the_app_can_do() {
        assert!(matches!(
            http(ErrorCode::InvalidToken, None),
            PsiError::Unauthorized { .. }
        ));
        assert!(matches!(
            http(ErrorCode::MissingToken, None),
            PsiError::Unauthorized { .. }
        ));
        assert!(matches!(
            http(ErrorCode::RateLimited, Some(9)),
            PsiError::RateLimited {
                retry_after_secs: Some(9),
                ..
            }
        ));
        assert!(matches!(
            http(ErrorCode::TooManySessions, None),
            PsiError::RateLimited { .. }
        ));
        assert!(matches!(
            http(ErrorCode::OtCapacity, Some(5)),
            PsiError::RateLimited {
                retry_after_secs: Some(5),
                ..
            }
        ));
        assert_eq!(
            ServerErrorCode::from(ErrorCode::OtCapacity),
            ServerErrorCode::TooManySessions
        );
        assert!(matches!(
            http(ErrorCode::StoreUnavailable, Some(2)),
            PsiError::RateLimited {
                retry_after_secs: Some(2),
                ..
            }
        ));
        assert_eq!(
            ServerErrorCode::from(ErrorCode::StoreUnavailable),
            ServerErrorCode::TooManySessions
        );
        assert!(matches!(
            http(ErrorCode::TooManyItems, None),
            PsiError::InvalidInput { .. }
        ));
        assert!(matches!(
            http(ErrorCode::EpochMismatch, None),
            PsiError::Server {
                status: 409,
                code: ServerErrorCode::EpochMismatch,
                retryable: true,
                ..
            }
        ));
        assert!(matches!(
            http(ErrorCode::WrongInstance, None),
            PsiError::Server {
                status: 421,
                code: ServerErrorCode::SessionExpired,
                retryable: true,
                ..
            }
        ));
        assert!(matches!(
            http(ErrorCode::Unknown, None),
            PsiError::Server {
                code: ServerErrorCode::Unknown,
                ..
            }
        ));
        assert!(matches!(
            PsiError::from(ClientError::from(psi_client::TransportError::timed_out(
                "x"
            ))),
            PsiError::Network { timeout: true, .. }
        ));
        assert!(matches!(
            PsiError::from(ClientError::BadResponse("x".into())),
            PsiError::Protocol {
                retryable: false,
                ..
            }
        ));
        assert!(matches!(
            PsiError::from(ClientError::Cancelled),
            PsiError::Cancelled
        ));
        let tls = ClientError::from(psi_client::TransportError::tls_failed("handshake"));
        assert!(!tls.is_retryable());
        assert!(matches!(
            PsiError::from(tls),
            PsiError::Tls { reason } if reason == "handshake"
        ));
    }

    #[test]
    fn the_cause_crosses_with_the_error() {
        // A network error's reason is its transport error's message.
        let e = PsiError::from(ClientError::from(psi_client::TransportError::failed(
            "io: Connection refused (os error 111)",
        )));
        assert!(
            matches!(&e, PsiError::Network { reason, timeout: false }
                if reason == "io: Connection refused (os error 111)"),
            "{e:?}"
        );
        // A chain whose causes are not in the message gets them appended, once.
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Inner);
        #[derive(Debug, thiserror::Error)]
        #[error("inner cause")]
        struct Inner;
        assert_eq!(with_causes(&Outer(Inner)), "outer: inner cause");
        let n = ClientError::from(psi_client::TransportError::failed("reset"));
        assert_eq!(
            with_causes(&n),
            "network error: reset",
            "the cause is already in it"
        );
    }

    #[test]
    fn every_known_code_has_its_own_ffi_code() {
        // The group relay's codes reach no call of these bindings (no group API yet).
        let group = [
            ErrorCode::UnknownGroup,
            ErrorCode::InvalidParty,
            ErrorCode::GroupFull,
            ErrorCode::GroupClosed,
            ErrorCode::MailboxFull,
            ErrorCode::GroupExpired,
            ErrorCode::TooManyGroups,
        ];
        for &code in ErrorCode::ALL.iter().filter(|c| !group.contains(c)) {
            assert_ne!(
                ServerErrorCode::from(code),
                ServerErrorCode::Unknown,
                "{code:?}"
            );
        }
    }
}
