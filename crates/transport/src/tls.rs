//! TLS 1.3 (rustls) under the pvfs protocol, for networks that are not trusted
//! (`[security] tls = true`): everything on the connection, bulk data included, is
//! encrypted and authenticated. The pvfs handshake runs inside it as on a plain
//! connection and still binds the connection to the file system and the user; TLS adds
//! confidentiality and integrity of the bytes, and the client checks the server's
//! certificate against the file system's CA (`docs/security.md`).
//!
//! A TLS connection has no socket descriptor of its own to `sendfile` from, so data
//! servers send reads through the copying path.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::stream::Conn;
use crate::TransportError;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("TLS file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// A file does not hold what it should.
    #[error("TLS file {path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the setup.
    #[error("TLS: {0}")]
    Setup(String),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&pem).collect();
    let certs = certs.map_err(|e| TlsError::Invalid {
        path: path.display().to_string(),
        message: format!("not PEM certificates: {e}"),
    })?;
    if certs.is_empty() {
        return Err(TlsError::Invalid {
            path: path.display().to_string(),
            message: "no certificate in the file".into(),
        });
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's side: its certificate chain and key.
#[derive(Clone)]
pub struct TlsServer {
    acceptor: TlsAcceptor,
}

impl TlsServer {
    /// Loads the certificate chain `cert` and private key `key` (PEM).
    pub fn load(cert: &Path, key: &Path) -> Result<TlsServer, TlsError> {
        let chain = certs(cert)?;
        // A private key others may read is refused, as the key files are
        // (`pvfs_auth::KeyRing::load`).
        let mode = {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(key)
                .map_err(|source| TlsError::Read {
                    path: key.display().to_string(),
                    source,
                })?
                .permissions()
                .mode()
                & 0o7777
        };
        if mode & 0o077 != 0 {
            return Err(TlsError::Invalid {
                path: key.display().to_string(),
                message: format!(
                    "readable or writable by others (mode {mode:04o}): a private key must be \
                     its owner's only (chmod 600)"
                ),
            });
        }
        let key_pem = read(key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Invalid {
            path: key.display().to_string(),
            message: format!("not a PEM private key: {e}"),
        })?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::Setup(e.to_string()))?;
        Ok(TlsServer {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Runs the TLS handshake on an accepted connection (the caller bounds it).
    pub async fn accept(&self, conn: Conn) -> Result<Conn, TransportError> {
        let Conn {
            read, write, peer, ..
        } = conn;
        let stream = self
            .acceptor
            .accept(tokio::io::join(read, write))
            .await
            .map_err(|e| TransportError::Closed(format!("TLS handshake with {peer}: {e}")))?;
        let (r, w) = tokio::io::split(stream);
        Ok(Conn {
            read: Box::new(r),
            write: Box::new(w),
            peer,
            fd: None,
        })
    }
}

/// A client's side: the CA that signs the servers' certificates.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
}

impl TlsClient {
    /// Trusts the certificates in `ca` (PEM) to sign servers' certificates.
    pub fn load(ca: &Path) -> Result<TlsClient, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for c in certs(ca)? {
            roots.add(c).map_err(|e| TlsError::Invalid {
                path: ca.display().to_string(),
                message: e.to_string(),
            })?;
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(TlsClient {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// Runs the TLS handshake on a new connection to `addr` (`host:port`), checking the
    /// server's certificate names its host, within `timeout`.
    pub async fn connect(
        &self,
        conn: Conn,
        addr: &str,
        timeout: Duration,
    ) -> Result<Conn, TransportError> {
        let host = host_of(addr);
        let name =
            ServerName::try_from(host.to_string()).map_err(|e| TransportError::Handshake {
                errno: pvfs_proto::Errno::EINVAL,
                message: format!("{addr}: not a name TLS can check ({e})"),
            })?;
        let Conn {
            read, write, peer, ..
        } = conn;
        let connect = self.connector.connect(name, tokio::io::join(read, write));
        let stream = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                return Err(TransportError::Handshake {
                    errno: pvfs_proto::Errno::EKEYREJECTED,
                    message: format!("TLS with {addr}: {e}"),
                })
            }
            Err(_) => {
                return Err(TransportError::Timeout {
                    what: format!("the TLS handshake with {addr}"),
                })
            }
        };
        let (r, w) = tokio::io::split(stream);
        Ok(Conn {
            read: Box::new(r),
            write: Box::new(w),
            peer,
            fd: None,
        })
    }
}

/// The host part of `host:port` (an IPv6 literal without its brackets).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A new CA and a certificate it signed for servers at `hosts` (names or IP
/// addresses), in PEM: (CA certificate, server certificate chain, server key).
pub fn generate(hosts: &[String]) -> Result<(String, String, String), TlsError> {
    let fail = |e: rcgen::Error| TlsError::Setup(format!("cannot make certificates: {e}"));
    let ca_key = rcgen::KeyPair::generate().map_err(fail)?;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "pvfs file system CA");
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca_cert = ca.self_signed(&ca_key).map_err(fail)?;
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let mut params = rcgen::CertificateParams::new(hosts.to_vec()).map_err(fail)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "pvfs servers");
    let cert = params.signed_by(&key, &ca_cert, &ca_key).map_err(fail)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn generated_certificates_carry_bytes_and_a_wrong_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = generate(&["127.0.0.1".into(), "localhost".into()]).unwrap();
        let (ca_p, cert_p, key_p) = (
            dir.path().join("ca.pem"),
            dir.path().join("cert.pem"),
            dir.path().join("key.pem"),
        );
        std::fs::write(&ca_p, ca).unwrap();
        std::fs::write(&cert_p, cert).unwrap();
        std::fs::write(&key_p, key).unwrap();
        // A key others may read is refused, with what to do.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = TlsServer::load(&cert_p, &key_p).err().unwrap().to_string();
        assert!(e.contains("mode 0644") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&key_p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let server = TlsServer::load(&cert_p, &key_p).unwrap();
        let client = TlsClient::load(&ca_p).unwrap();
        let pair = |name: &'static str| {
            let (a, b) = tokio::io::duplex(1 << 16);
            let (ar, aw) = tokio::io::split(a);
            let (br, bw) = tokio::io::split(b);
            let c = Conn {
                read: Box::new(ar),
                write: Box::new(aw),
                peer: name.into(),
                fd: None,
            };
            let s = Conn {
                read: Box::new(br),
                write: Box::new(bw),
                peer: "client".into(),
                fd: None,
            };
            (c, s)
        };
        let (c, s) = pair("127.0.0.1:1");
        let srv = server.clone();
        let accepted = tokio::spawn(async move { srv.accept(s).await });
        let mut c = client
            .connect(c, "127.0.0.1:1", Duration::from_secs(10))
            .await
            .unwrap();
        let mut s = accepted.await.unwrap().unwrap();
        c.write.write_all(b"through tls").await.unwrap();
        c.write.flush().await.unwrap();
        let mut got = [0u8; 11];
        s.read.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"through tls");
        // A server whose certificate does not name the host is refused.
        let (c, s) = pair("10.9.8.7:1");
        let srv = server.clone();
        tokio::spawn(async move { srv.accept(s).await });
        let e = client
            .connect(c, "10.9.8.7:1", Duration::from_secs(10))
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("TLS"), "{e}");
        assert_eq!(host_of("[::1]:7000"), "::1");
    }
}
