//! Remote strings as OVS tools take them: `unix:PATH`, `tcp:HOST:PORT`, `ssl:HOST:PORT`
//! (IPv6 hosts in brackets), comma-separated for a cluster (`ovn-nbctl --db` style).

use std::fmt;
use std::path::PathBuf;

/// Port ovsdb-server listens on when a remote names none (RFC 7047 §1.2: 6640).
const DEFAULT_PORT: u16 = 6640;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad remote {remote:?}: {reason}")]
pub struct RemoteError {
    pub remote: String,
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    Unix(PathBuf),
    Tcp { host: String, port: u16 },
    Ssl { host: String, port: u16 },
}

impl Remote {
    pub fn parse(s: &str) -> Result<Remote, RemoteError> {
        let err = |reason| RemoteError {
            remote: s.to_owned(),
            reason,
        };
        let s = s.trim();
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(err("empty socket path"));
            }
            return Ok(Remote::Unix(PathBuf::from(path)));
        }
        let (ssl, rest) = if let Some(r) = s.strip_prefix("tcp:") {
            (false, r)
        } else if let Some(r) = s.strip_prefix("ssl:") {
            (true, r)
        } else {
            return Err(err("expected unix:, tcp: or ssl:"));
        };
        let (host, port) = if let Some(r) = rest.strip_prefix('[') {
            let (h, tail) = r.split_once(']').ok_or_else(|| err("unclosed '['"))?;
            (h, tail.strip_prefix(':'))
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (rest, None),
            }
        };
        if host.is_empty() {
            return Err(err("empty host"));
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => p.parse().map_err(|_| err("bad port"))?,
        };
        let host = host.to_owned();
        Ok(if ssl {
            Remote::Ssl { host, port }
        } else {
            Remote::Tcp { host, port }
        })
    }

    /// Parse a comma-separated list.
    pub fn parse_list(s: &str) -> Result<Vec<Remote>, RemoteError> {
        let list: Vec<Remote> = s
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(Remote::parse)
            .collect::<Result<_, _>>()?;
        if list.is_empty() {
            return Err(RemoteError {
                remote: s.to_owned(),
                reason: "no remote",
            });
        }
        Ok(list)
    }
}

impl fmt::Display for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hp = |f: &mut fmt::Formatter<'_>, scheme, host: &str, port| {
            if host.contains(':') {
                write!(f, "{scheme}:[{host}]:{port}")
            } else {
                write!(f, "{scheme}:{host}:{port}")
            }
        };
        match self {
            Remote::Unix(p) => write!(f, "unix:{}", p.display()),
            Remote::Tcp { host, port } => hp(f, "tcp", host, port),
            Remote::Ssl { host, port } => hp(f, "ssl", host, port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let l = Remote::parse_list("tcp:127.0.0.1:6641,ssl:[::1]:6643, unix:/run/nb.sock").unwrap();
        assert_eq!(
            l[0],
            Remote::Tcp {
                host: "127.0.0.1".into(),
                port: 6641
            }
        );
        assert_eq!(
            l[1],
            Remote::Ssl {
                host: "::1".into(),
                port: 6643
            }
        );
        assert_eq!(l[2].to_string(), "unix:/run/nb.sock");
        assert_eq!(l[1].to_string(), "ssl:[::1]:6643");
        assert_eq!(
            Remote::parse("tcp:h").unwrap(),
            Remote::Tcp {
                host: "h".into(),
                port: 6640
            }
        );
        for bad in ["", "http:x", "tcp::1", "tcp:h:99999", "unix:", "ssl:[::1"] {
            assert!(Remote::parse(bad).is_err(), "{bad}");
        }
    }
}
