//! `pvfs top`: every server's operation rates, bandwidth and latency, refreshed in
//! the terminal, from the metrics each server serves (`[[servers]] metrics`;
//! `docs/operations.md`, "Metrics").
//!
//! Each refresh scrapes every server's `GET /metrics` and shows what changed since
//! the last one: requests and errors per second, bytes read and written per second,
//! the mean and 99th-percentile latency of the requests answered meanwhile (from the
//! latency histograms), connections and requests in flight.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use pvfs_config::{format_size, parse_duration, Config};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::Constraint;
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Cell, Row, Table};

use crate::cmd::load_config;
use crate::ConfigArg;

/// Options of `pvfs top`.
#[derive(Args)]
pub struct TopArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Time between refreshes.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    interval: Duration,
}

/// Longest a scrape of one server may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// Largest metrics text read from a server.
const TEXT_MAX: u64 = 8 << 20;

/// One scrape of one server: every sample, by name and labels.
#[derive(Default, Clone)]
struct Scrape {
    samples: BTreeMap<(String, String), f64>,
    at: Option<Instant>,
}

impl Scrape {
    /// The sum of the samples named `name` (all labels).
    fn sum(&self, name: &str) -> f64 {
        self.samples
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, v)| v)
            .sum()
    }

    /// The latency histogram's buckets, summed over request kinds: (upper bound,
    /// cumulative count), in bound order.
    fn buckets(&self) -> Vec<(f64, f64)> {
        let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for ((n, labels), v) in &self.samples {
            if n != "pvfs_server_request_duration_seconds_bucket" {
                continue;
            }
            let Some(le) = label(labels, "le") else {
                continue;
            };
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            by_le.entry(bound.to_bits()).or_insert((bound, 0.0)).1 += v;
        }
        let mut out: Vec<_> = by_le.into_values().collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }
}

/// The value of label `key` in a `{k="v",...}` set.
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let needle = format!("{key}=\"");
    let start = labels.find(&needle)? + needle.len();
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

/// The samples of OpenMetrics (or Prometheus) text: `name{labels} value` lines.
fn parse(text: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(p) => p,
            None => continue,
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        *out.entry((name.to_string(), labels.to_string()))
            .or_default() += value;
    }
    out
}

/// `GET /metrics` on `addr`, within [`SCRAPE_TIMEOUT`].
fn scrape(addr: &str) -> Result<Scrape, String> {
    let sock = std::net::ToSocketAddrs::to_socket_addrs(addr)
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no address")?;
    let mut s =
        std::net::TcpStream::connect_timeout(&sock, SCRAPE_TIMEOUT).map_err(|e| e.to_string())?;
    let deadline = Some(SCRAPE_TIMEOUT);
    s.set_read_timeout(deadline).map_err(|e| e.to_string())?;
    s.set_write_timeout(deadline).map_err(|e| e.to_string())?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.take(TEXT_MAX)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(head.lines().next().unwrap_or("").to_string());
    }
    Ok(Scrape {
        samples: parse(body),
        at: Some(Instant::now()),
    })
}

/// The latency under which `q` of the requests counted between two histograms fell
/// (the upper bound of the bucket that holds that rank), if any were.
fn quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let old: BTreeMap<u64, f64> = before.iter().map(|(b, c)| (b.to_bits(), *c)).collect();
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|(b, c)| (*b, c - old.get(&b.to_bits()).copied().unwrap_or(0.0)))
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    delta.iter().find(|(_, c)| *c >= q * total).map(|(b, _)| *b)
}

/// One server's line: what changed between two scrapes.
fn row(name: &str, before: &Scrape, after: &Scrape) -> Vec<String> {
    let secs = match (before.at, after.at) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64().max(1e-3),
        _ => return vec![name.into(), "(first look)".into()],
    };
    let rate = |n: &str| (after.sum(n) - before.sum(n)).max(0.0) / secs;
    let answered = after.sum("pvfs_server_request_duration_seconds_count")
        - before.sum("pvfs_server_request_duration_seconds_count");
    let took = after.sum("pvfs_server_request_duration_seconds_sum")
        - before.sum("pvfs_server_request_duration_seconds_sum");
    let ms = |s: f64| format!("{:.2} ms", s * 1e3);
    let mean = if answered > 0.0 {
        ms(took / answered)
    } else {
        "-".into()
    };
    let p99 = quantile(&before.buckets(), &after.buckets(), 0.99).map_or("-".into(), |b| {
        if b.is_finite() {
            format!("<{}", ms(b))
        } else {
            "slow".into()
        }
    });
    let per_sec = |n: &str| format!("{}/s", format_size(rate(n) as u64));
    vec![
        name.into(),
        format!("{:.0}", rate("pvfs_server_requests_total")),
        format!("{:.1}", rate("pvfs_server_request_errors_total")),
        per_sec("pvfs_server_read_bytes_total"),
        per_sec("pvfs_server_written_bytes_total"),
        mean,
        p99,
        format!("{:.0}", after.sum("pvfs_server_connections")),
        format!("{:.0}", after.sum("pvfs_server_requests_in_flight")),
    ]
}

/// The table's heading.
const HEADING: [&str; 9] = [
    "server",
    "req/s",
    "err/s",
    "read",
    "written",
    "mean",
    "p99",
    "conns",
    "in flight",
];

/// Scrapes every server of `config` and makes the rows, keeping `last` for the next
/// round.
fn rows(config: &Config, last: &mut [Scrape]) -> Vec<Vec<String>> {
    config
        .servers
        .iter()
        .zip(last.iter_mut())
        .map(|(s, prev)| match &s.metrics {
            None => vec![
                s.name.clone(),
                "no metrics address in the configuration".into(),
            ],
            Some(addr) => match scrape(addr) {
                Ok(now) => {
                    let r = row(&s.name, prev, &now);
                    *prev = now;
                    r
                }
                Err(e) => vec![s.name.clone(), format!("{addr}: {e}")],
            },
        })
        .collect()
}

/// Shows the servers' rates until `q`, Esc or Ctrl-C.
pub fn run(a: TopArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&a.config.config)?;
    let interval = a.interval.max(Duration::from_millis(100));
    let mut last = vec![Scrape::default(); config.servers.len()];
    let mut terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let result = (|| -> anyhow::Result<()> {
        loop {
            let lines = rows(&config, &mut last);
            terminal.draw(|f| {
                let widths = [
                    Constraint::Length(10),
                    Constraint::Length(8),
                    Constraint::Length(7),
                    Constraint::Length(11),
                    Constraint::Length(11),
                    Constraint::Length(10),
                    Constraint::Length(11),
                    Constraint::Length(6),
                    Constraint::Min(9),
                ];
                let header = Row::new(HEADING.map(Cell::from))
                    .style(Style::default().add_modifier(Modifier::BOLD));
                let table = Table::new(lines.into_iter().map(Row::new), widths)
                    .header(header)
                    .block(Block::bordered().title(format!(
                        " pvfs top: {}, every {:?} (q quits) ",
                        config.name, interval
                    )));
                f.render_widget(table, f.area());
            })?;
            let until = Instant::now() + interval;
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                if !event::poll(left)? {
                    break;
                }
                if let Event::Key(k) = event::read()? {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if k.kind == KeyEventKind::Press
                        && (ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc))
                    {
                        return Ok(());
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_p99_comes_from_the_requests_between_two_scrapes() {
        let before = [(0.001, 10.0), (0.004, 10.0), (f64::INFINITY, 10.0)];
        // 100 more requests: 98 under 1 ms, 2 under 4 ms.
        let after = [(0.001, 108.0), (0.004, 110.0), (f64::INFINITY, 110.0)];
        assert_eq!(quantile(&before, &after, 0.99), Some(0.004));
        assert_eq!(quantile(&before, &after, 0.5), Some(0.001));
        assert_eq!(quantile(&after, &after, 0.99), None, "no request meanwhile");
    }

    #[test]
    fn samples_are_read_with_their_labels() {
        let s = parse(
            "# TYPE x counter\nx_total{op=\"Read\"} 3\nx_total{op=\"Write\"} 4.5\ny 7\n# EOF\n",
        );
        let sc = Scrape {
            samples: s,
            at: None,
        };
        assert_eq!(sc.sum("x_total"), 7.5);
        assert_eq!(sc.sum("y"), 7.0);
        assert_eq!(label("op=\"Read\",le=\"0.1\"", "le"), Some("0.1"));
    }
}
