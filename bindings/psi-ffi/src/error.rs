//! The one error of the bindings: each variant says what the app can do. Converted from
//! psi-client's error in one place ([`From<ClientError>`]). Messages never contain
//! contact data, labels or keys.

use psi_client::group::GroupError as CoreGroupError;
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

/// Why a group call failed (`DiscoveryClient::group_create`, `group_join`,
/// `GroupSession::run`, `GroupSession::end`): a failure of the group itself, with what the
/// app can do, or any other failure, as the match calls report it. Its own type rather
/// than a new [`PsiError`] variant, which would break the exhaustive matches of the Swift
/// SDK and of apps (the match calls never fail with a group failure).
#[derive(Debug, thiserror::Error, uniffi::Error)]
pub enum GroupError {
    /// The group failed: `failure` says how. The relay's group codes (docs/api.md,
    /// "Errors") and the group layer's own failures (docs/protocol/group-psi.md) arrive
    /// here.
    #[error("group failed ({failure:?}): {reason}")]
    Failed {
        /// What failed.
        failure: GroupFailure,
        /// What went wrong (party indices and counts only: never a contact or the code).
        reason: String,
        /// True if the same call may succeed later (a new group, or the same call after
        /// `retry_after_secs`).
        retryable: bool,
        /// Seconds to wait, from the server's `Retry-After` ([`GroupFailure::TooManyGroups`],
        /// [`GroupFailure::MailboxFull`]).
        retry_after_secs: Option<u64>,
    },
    /// Not a group failure: what any call can fail with (no network, token refused, rate
    /// limits, [`PsiError::Cancelled`], bad input such as a size outside 2 ..= 16).
    #[error("{error}")]
    Call {
        /// The failure, as a match would report it.
        error: PsiError,
    },
}

impl From<PsiError> for GroupError {
    fn from(error: PsiError) -> Self {
        GroupError::Call { error }
    }
}

impl From<ClientError> for GroupError {
    fn from(e: ClientError) -> Self {
        let failed = |failure: GroupFailure, reason: String, retry_after_secs| GroupError::Failed {
            failure,
            reason,
            retryable: failure.retryable(),
            retry_after_secs,
        };
        match e {
            ClientError::Http {
                code,
                message,
                retry_after,
                ..
            } if GroupFailure::of_code(code).is_some() => failed(
                GroupFailure::of_code(code).unwrap_or(GroupFailure::Other),
                message,
                retry_after,
            ),
            ClientError::Group(g) => failed(GroupFailure::of_group(&g), g.to_string(), None),
            other => GroupError::Call {
                error: other.into(),
            },
        }
    }
}

/// Why a group failed ([`GroupError::Failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum GroupFailure {
    /// The code is not a group code (`GROUP_ID.SECRET`): mistyped or cut. Refused before
    /// any request.
    BadCode,
    /// The server knows no group of this code: never created, ended by every party, or
    /// removed after it expired (`unknown_group`).
    UnknownGroup,
    /// Every party of the group has joined: no one else may (`group_full`).
    GroupFull,
    /// Another party ended the group (left, failed or was cancelled) before this run
    /// finished (`group_closed`).
    GroupEnded,
    /// The group's lifetime on the server passed (`group_expired`).
    GroupExpired,
    /// The server does not take this party's credential for the group (`invalid_party`).
    InvalidParty,
    /// A party's mailbox stayed full until the run's deadline (`mailbox_full`).
    MailboxFull,
    /// The server's group limits are reached (`too_many_groups`): retry after
    /// `retry_after_secs`.
    TooManyGroups,
    /// The group did not fill, or the run did not finish, within the run's deadline.
    TimedOut,
    /// A key announcement or a message that is not the group's: altered, replayed,
    /// reordered or dropped on the way (the relay, or someone without the code). The run
    /// gives no answer rather than a wrong one.
    Tampered,
    /// A group failure added to the core after these bindings were built.
    Other,
}

impl GroupFailure {
    /// The relay's code as a failure, if it is one of the group relay's.
    fn of_code(code: ErrorCode) -> Option<GroupFailure> {
        Some(match code {
            ErrorCode::UnknownGroup => GroupFailure::UnknownGroup,
            ErrorCode::InvalidParty => GroupFailure::InvalidParty,
            ErrorCode::GroupFull => GroupFailure::GroupFull,
            ErrorCode::GroupClosed => GroupFailure::GroupEnded,
            ErrorCode::MailboxFull => GroupFailure::MailboxFull,
            ErrorCode::GroupExpired => GroupFailure::GroupExpired,
            ErrorCode::TooManyGroups => GroupFailure::TooManyGroups,
            _ => return None,
        })
    }

    /// The group layer's failure.
    fn of_group(e: &CoreGroupError) -> GroupFailure {
        match e {
            CoreGroupError::BadCode => GroupFailure::BadCode,
            CoreGroupError::BadAnnouncement { .. }
            | CoreGroupError::Tampered { .. }
            | CoreGroupError::OutOfOrder { .. }
            | CoreGroupError::Unexpected { .. } => GroupFailure::Tampered,
            CoreGroupError::TimedOut { .. } => GroupFailure::TimedOut,
            CoreGroupError::Ended => GroupFailure::GroupEnded,
            _ => GroupFailure::Other,
        }
    }

    /// True if the same call may succeed later: a new group (ended, expired, timed out,
    /// tampered with on the way) or the same call after a wait (limits).
    fn retryable(self) -> bool {
        !matches!(
            self,
            GroupFailure::BadCode | GroupFailure::InvalidParty | GroupFailure::Other
        )
    }
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
            // The group relay's codes (docs/adr/0051-group-relay.md) reach the app as
            // `GroupError::Failed` with their own `GroupFailure` (`From<ClientError> for
            // GroupError`), never as `PsiError::Server`; a retry event (the match runs' only other use of
            // this enum) never carries one. New variants here would break exhaustive
            // matches in the Kotlin and Swift SDKs.
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
    fn every_group_failure_is_a_typed_group_error() {
        let codes = [
            (ErrorCode::UnknownGroup, GroupFailure::UnknownGroup),
            (ErrorCode::InvalidParty, GroupFailure::InvalidParty),
            (ErrorCode::GroupFull, GroupFailure::GroupFull),
            (ErrorCode::GroupClosed, GroupFailure::GroupEnded),
            (ErrorCode::MailboxFull, GroupFailure::MailboxFull),
            (ErrorCode::GroupExpired, GroupFailure::GroupExpired),
            (ErrorCode::TooManyGroups, GroupFailure::TooManyGroups),
        ];
        for (code, want) in codes {
            let e = ClientError::Http {
                status: code.status(),
                code,
                message: "m".into(),
                retry_after: Some(3),
            };
            match GroupError::from(e) {
                GroupError::Failed {
                    failure,
                    retry_after_secs: Some(3),
                    ..
                } => assert_eq!(failure, want, "{code:?}"),
                other => panic!("{code:?} became {other:?}"),
            }
        }
        // Every relay code of the group API is one of those: none falls to `Server`.
        for &code in ErrorCode::ALL {
            let is_group = codes.iter().any(|(c, _)| *c == code);
            assert_eq!(GroupFailure::of_code(code).is_some(), is_group, "{code:?}");
        }
        let layer = [
            (CoreGroupError::BadCode, GroupFailure::BadCode, false),
            (
                CoreGroupError::BadAnnouncement { party: 2 },
                GroupFailure::Tampered,
                true,
            ),
            (
                CoreGroupError::Tampered { from: 1 },
                GroupFailure::Tampered,
                true,
            ),
            (
                CoreGroupError::OutOfOrder {
                    from: 1,
                    expected: 2,
                    got: 4,
                },
                GroupFailure::Tampered,
                true,
            ),
            (
                CoreGroupError::TimedOut { what: "x" },
                GroupFailure::TimedOut,
                true,
            ),
            (CoreGroupError::Ended, GroupFailure::GroupEnded, true),
        ];
        for (e, want, retry) in layer {
            match GroupError::from(ClientError::Group(e.clone())) {
                GroupError::Failed {
                    failure,
                    retryable,
                    reason,
                    retry_after_secs: None,
                } => {
                    assert_eq!((failure, retryable), (want, retry), "{e:?}");
                    assert_eq!(reason, e.to_string());
                }
                other => panic!("{e:?} became {other:?}"),
            }
        }
        // Anything else is the match calls' error.
        assert!(matches!(
            GroupError::from(ClientError::Cancelled),
            GroupError::Call {
                error: PsiError::Cancelled
            }
        ));
        assert!(matches!(
            GroupError::from(http_error(ErrorCode::InvalidToken)),
            GroupError::Call {
                error: PsiError::Unauthorized { .. }
            }
        ));
    }

    fn http_error(code: ErrorCode) -> ClientError {
        ClientError::Http {
            status: code.status(),
            code,
            message: "m".into(),
            retry_after: None,
        }
    }

    #[test]
    fn every_known_code_has_its_own_ffi_code() {
        // The group relay's codes become `GroupError::Failed` (the test above), not a
        // `ServerErrorCode`.
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
