//! Why a request to the API server got no answer, in the words an operator searches for:
//! connection refused, no such host, TLS, timed out. The HTTP stack's own error says only
//! `client error (Connect)`; the cause is further down its chain of sources, an `io::Error`
//! from the socket or the resolver's or TLS library's message.
//!
//! Pure: reads an error's chain, never the network.

use std::error::Error;
use std::fmt;
use std::io;

/// The cause of a failed request, as its log line and `/healthz` name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Nothing listens at the address (RST to the SYN).
    ConnectionRefused,
    /// The host name does not resolve.
    NoSuchHost,
    /// The TLS handshake failed: an unknown certificate authority, a name the certificate does
    /// not cover, or a peer that does not speak TLS.
    Tls,
    /// No answer within the connect or read timeout.
    TimedOut,
    /// No route to the address, or the network is down.
    Unreachable,
    /// The connection was reset or closed while the request was under way.
    Reset,
    /// The client could not get credentials (an exec plugin or token file failed).
    Credentials,
    /// Anything else; the error's own text says what.
    Other,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::ConnectionRefused => "connection refused",
            Cause::NoSuchHost => "no such host",
            Cause::Tls => "TLS",
            Cause::TimedOut => "timed out",
            Cause::Unreachable => "no route to host",
            Cause::Reset => "connection reset",
            Cause::Credentials => "credentials",
            Cause::Other => "transport error",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The cause of `error`, read from the innermost error of its chain that says one.
pub fn cause(error: &(dyn Error + 'static)) -> Cause {
    let mut chain: Vec<&(dyn Error + 'static)> = vec![error];
    let mut next = error.source();
    while let Some(e) = next {
        chain.push(e);
        next = e.source();
    }
    // Innermost first: the socket's or resolver's error is the most specific.
    for e in chain.iter().rev() {
        if let Some(c) = e.downcast_ref::<io::Error>().and_then(io_cause) {
            return c;
        }
        if let Some(c) = text_cause(&e.to_string()) {
            return c;
        }
        if let Some(kube::Error::Auth(_)) = e.downcast_ref::<kube::Error>() {
            return Cause::Credentials;
        }
    }
    Cause::Other
}

fn io_cause(e: &io::Error) -> Option<Cause> {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => Some(Cause::ConnectionRefused),
        io::ErrorKind::TimedOut => Some(Cause::TimedOut),
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            Some(Cause::Unreachable)
        }
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => Some(Cause::Reset),
        _ => None,
    }
}

/// Causes only the message tells: the resolver's (hyper's connector says `dns error`, the C
/// library `failed to lookup address information`) and the TLS library's.
fn text_cause(text: &str) -> Option<Cause> {
    let lower = text.to_ascii_lowercase();
    if lower.contains("dns error") || lower.contains("failed to lookup address") {
        return Some(Cause::NoSuchHost);
    }
    const TLS_WORDS: [&str; 5] = [
        "certificate",
        "tls",
        "handshake",
        "received fatal alert",
        "corrupt message",
    ];
    if TLS_WORDS.iter().any(|w| lower.contains(w)) {
        return Some(Cause::Tls);
    }
    if lower.contains("deadline has elapsed") || lower.contains("timed out") {
        return Some(Cause::TimedOut);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with one source, as the HTTP stack's layers wrap their inner errors.
    #[derive(Debug)]
    struct Wrapped(&'static str, Box<dyn Error + Send + Sync>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.1)
        }
    }

    fn connect(inner: Box<dyn Error + Send + Sync>) -> Wrapped {
        Wrapped(
            "client error (Connect)",
            Box::new(Wrapped("tcp connect error", inner)),
        )
    }

    #[test]
    fn the_socket_error_under_the_stacks_words_is_the_cause() {
        let refused = connect(Box::new(io::Error::from(io::ErrorKind::ConnectionRefused)));
        assert_eq!(cause(&refused), Cause::ConnectionRefused);
        let timed_out = connect(Box::new(io::Error::from(io::ErrorKind::TimedOut)));
        assert_eq!(cause(&timed_out), Cause::TimedOut);
        let unreachable = connect(Box::new(io::Error::from(io::ErrorKind::HostUnreachable)));
        assert_eq!(cause(&unreachable), Cause::Unreachable);
    }

    #[test]
    fn resolver_and_tls_failures_are_told_by_their_messages() {
        let dns = Wrapped(
            "client error (Connect)",
            Box::new(Wrapped(
                "dns error",
                Box::new(io::Error::other(
                    "failed to lookup address information: Name or service not known",
                )),
            )),
        );
        assert_eq!(cause(&dns), Cause::NoSuchHost);
        let tls = Wrapped(
            "client error (Connect)",
            Box::new(io::Error::new(
                io::ErrorKind::InvalidData,
                "invalid peer certificate: UnknownIssuer",
            )),
        );
        assert_eq!(cause(&tls), Cause::Tls);
        let plain_http = Wrapped(
            "client error (Connect)",
            Box::new(io::Error::new(
                io::ErrorKind::InvalidData,
                "received corrupt message of type InvalidContentType",
            )),
        );
        assert_eq!(cause(&plain_http), Cause::Tls);
    }

    #[test]
    fn an_error_that_names_no_cause_is_other() {
        let e = Wrapped(
            "client error (SendRequest)",
            Box::new(io::Error::other("?")),
        );
        assert_eq!(cause(&e), Cause::Other);
    }
}
