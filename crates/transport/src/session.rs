//! Opening a client connection: connect, prove who we are and check who the server is
//! (the handshake of `pvfs_auth::handshake`), then multiplex requests on it with every
//! frame authenticated.

use std::sync::Arc;
use std::time::Duration;

use pvfs_auth::{ClientProof, HandshakeError};
use pvfs_proto::handshake::Welcome;

use crate::buf::BufPool;
use crate::mux::MuxConn;
#[allow(unused_imports)]
use crate::stream::AutoTransport;
use crate::stream::{Conn, Transport};
use crate::tls::TlsClient;
use crate::TransportError;

/// What a client needs to open a connection to one server.
pub struct Target<'a> {
    /// The server's address.
    pub addr: &'a str,
    /// The server's configured name (the handshake checks it).
    pub server: &'a str,
    /// The file system's id (the handshake checks it).
    pub fsid: u64,
    /// How to reach it: [`AutoTransport`] (TCP or Unix sockets by the address), or
    /// another network (a simulated one in tests).
    pub via: &'a dyn Transport,
}

/// Runs the client's side of the handshake on `conn` within `timeout`.
pub async fn handshake(
    conn: &mut Conn,
    proof: &ClientProof,
    target: &Target<'_>,
    client_name: &str,
    timeout: Duration,
) -> Result<pvfs_auth::ClientSession, TransportError> {
    let run = pvfs_auth::handshake::client(
        &mut conn.read,
        &mut conn.write,
        proof,
        target.fsid,
        target.server,
        client_name,
    );
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(HandshakeError::Io(m))) => Err(TransportError::Closed(format!(
            "{} ({}): {m}",
            target.server, target.addr
        ))),
        Ok(Err(e)) => Err(TransportError::Handshake {
            errno: e.errno(),
            message: format!("{} ({}): {e}", target.server, target.addr),
        }),
        Err(_) => Err(TransportError::Timeout {
            what: format!("the handshake with {} ({})", target.server, target.addr),
        }),
    }
}

/// Connects to `target` (over TLS when `tls` is given, except on a local socket), runs
/// the handshake, and starts a multiplexed connection whose frames carry the session's
/// MACs. `connect_timeout` bounds the connect, TLS and the handshake each;
/// `io_timeout` every later wait.
pub async fn connect_mux(
    target: &Target<'_>,
    proof: &ClientProof,
    tls: Option<&TlsClient>,
    client_name: &str,
    connect_timeout: Duration,
    io_timeout: Duration,
    pool: BufPool,
) -> Result<(Arc<MuxConn>, Welcome), TransportError> {
    let mut conn = target.via.connect(target.addr, connect_timeout).await?;
    if let (Some(tls), false) = (tls, target.addr.starts_with("unix:")) {
        conn = tls.connect(conn, target.addr, connect_timeout).await?;
    }
    let session = match handshake(&mut conn, proof, target, client_name, connect_timeout).await {
        Err(TransportError::Closed(why))
            if tls.is_none() && why.contains("closed the connection") =>
        {
            // A server that runs over TLS closes a client that does not.
            return Err(TransportError::Closed(format!(
                "{why} (if the servers run over TLS, the client needs [security] tls = true)"
            )));
        }
        other => other?,
    };
    let mux = MuxConn::start(conn, pool, io_timeout, Some(session.macs));
    Ok((mux, session.welcome))
}

/// The batch job this process runs in, as servers count it (`PVFS_JOBID`, else
/// Slurm's `SLURM_JOB_ID`): letters, digits, `.`, `_` and `-`, at most 64 of them.
pub fn job_id() -> Option<String> {
    ["PVFS_JOBID", "SLURM_JOB_ID"]
        .into_iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|j| !j.is_empty())
        .filter(|j| valid_job(j))
}

/// Whether `job` may name a job in metrics (bounded, and safe as a label value).
pub fn valid_job(job: &str) -> bool {
    !job.is_empty()
        && job.len() <= 64
        && job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c))
}

/// The job a client's handshake name carries (`...;job=ID`), if a valid one.
pub fn job_of(client_name: &str) -> Option<&str> {
    let (_, rest) = client_name.split_once(";job=")?;
    let job = rest.split('#').next()?;
    valid_job(job).then_some(job)
}

/// What this process calls itself in handshakes (the servers log it): program name,
/// host and pid, and its batch job ([`job_id`]) as `;job=ID`.
pub fn client_name() -> String {
    let prog = std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "?".into());
    let mut host = [0u8; 256];
    // SAFETY: host is writable for its length; gethostname NUL-terminates within it
    // or truncates.
    let ok = unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len() - 1) } == 0;
    let host = if ok {
        let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
        String::from_utf8_lossy(&host[..end]).into_owned()
    } else {
        "?".into()
    };
    let job = job_id().map_or(String::new(), |j| format!(";job={j}"));
    format!("{prog}@{host}:{}{job}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_travels_in_the_client_name_and_only_a_valid_one_counts() {
        assert_eq!(job_of("pvfs@h:12;job=4711#00000000000000ff"), Some("4711"));
        assert_eq!(job_of("pvfs@h:12;job=run-3.a_b"), Some("run-3.a_b"));
        assert_eq!(job_of("pvfs@h:12#ff"), None);
        assert_eq!(job_of("pvfs@h:12;job=#ff"), None);
        assert_eq!(job_of("pvfs@h:12;job=a\"b"), None);
        assert_eq!(job_of(&format!("x;job={}", "9".repeat(65))), None);
    }
}
