//! A `memdial serve` child on a loopback port and a minimal HTTP/1.1 client over
//! std's TcpStream (raw bytes, so malformed requests can be sent as they are).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = memdial_testkit::memdial_bin!();

/// A running server; killed (SIGKILL) when dropped unless stopped first.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// `memdial serve --model MODEL --port 0 ARGS…`, once it listens.
    pub fn start(model: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--model")
            .arg(model)
            .args(["--port", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn memdial serve");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut port = None;
        let mut line = String::new();
        while port.is_none() {
            line.clear();
            if err.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.kill();
                panic!(
                    "memdial serve exited before listening: {}",
                    log.lock().unwrap()
                );
            }
            log.lock().unwrap().push_str(&line);
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr = rest.split_whitespace().next().unwrap();
                port = Some(addr.rsplit(':').next().unwrap().parse().unwrap());
            }
        }
        let l2 = log.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).unwrap_or(0) > 0 {
                l2.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Server {
            child,
            port: port.unwrap(),
            log,
        }
    }

    /// Sends SIGTERM and waits (at most `within`) for the exit code.
    pub fn terminate(&mut self, within: Duration) -> Option<i32> {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < within {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn get(&self, path: &str) -> Response {
        request(
            self.port,
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
            b"",
        )
    }

    /// POST `body` as JSON to `path` with extra header lines.
    pub fn post(&self, path: &str, headers: &str, body: &[u8]) -> Response {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n",
            body.len()
        );
        request(self.port, &head, body)
    }

    pub fn post_json(&self, path: &str, body: &Value) -> Response {
        self.post(path, "", body.to_string().as_bytes())
    }

    /// Opens a streamed POST; read its events with [`Sse::next_event`].
    pub fn stream(&self, path: &str, body: &Value) -> Sse {
        let b = body.to_string();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            b.len()
        );
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(b.as_bytes()).unwrap();
        let mut r = BufReader::new(s);
        let (status, headers) = read_head(&mut r);
        Sse {
            status,
            headers,
            r,
            buf: String::new(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A complete response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn header(&self, k: &str) -> Option<&str> {
        header(&self.headers, k)
    }
}

fn header<'a>(h: &'a [(String, String)], k: &str) -> Option<&'a str> {
    h.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(k))
        .map(|(_, v)| v.as_str())
}

fn read_head(r: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no status line: {line:?}"))
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    (status, headers)
}

/// Sends `head` + `body` on a new connection and reads the whole response.
pub fn request(port: u16, head: &str, body: &[u8]) -> Response {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    // The server may answer (413) before the whole body is sent: not an error here.
    let _ = s.write_all(body);
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let mut out = Vec::new();
    if header(&headers, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let n = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            out.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = header(&headers, "content-length").and_then(|v| v.parse::<usize>().ok())
    {
        out.resize(n, 0);
        r.read_exact(&mut out).unwrap();
    } else {
        let _ = r.read_to_end(&mut out);
    }
    Response {
        status,
        headers,
        body: out,
    }
}

/// A streamed (chunked, text/event-stream) response read event by event.
pub struct Sse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    r: BufReader<TcpStream>,
    buf: String,
}

impl Sse {
    /// The next `data:` payload (`None` at the end of the body).
    pub fn next_event(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.find("\n\n") {
                let ev: String = self.buf.drain(..i + 2).collect();
                let data: Vec<&str> = ev
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: ").or(l.strip_prefix("data:")))
                    .collect();
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Some(data.join("\n"));
            }
            let mut line = String::new();
            if self.r.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let n = usize::from_str_radix(line.trim(), 16).ok()?;
            if n == 0 {
                return None;
            }
            let mut chunk = vec![0; n + 2];
            self.r.read_exact(&mut chunk).ok()?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    }

    /// Every remaining event.
    pub fn rest(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.next_event()).collect()
    }
}

/// Ids `memdial run` generates for `prompt` with these settings.
pub fn run_ids(
    model: &Path,
    prompt: &[u32],
    max_tokens: usize,
    temperature: f32,
    seed: u64,
) -> Vec<u32> {
    let ids: Vec<String> = prompt.iter().map(u32::to_string).collect();
    let o = Command::new(BIN)
        .arg("run")
        .arg("--model")
        .arg(model)
        .args(["--prompt-ids", &ids.join(",")])
        .args(["--max-tokens", &max_tokens.to_string()])
        .args(["--temperature", &temperature.to_string()])
        .args(["--seed", &seed.to_string()])
        .args(["--output", "ids"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .trim()
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect()
}

/// The token ids of a streamed response (`return_token_ids`), its finish reason and
/// whether it ended with `[DONE]`; panics on an error event.
pub fn stream_ids(events: &[String]) -> (Vec<u32>, Option<String>, bool) {
    let mut ids = Vec::new();
    let mut finish = None;
    let mut done = false;
    for e in events {
        if e == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(e).unwrap();
        assert!(v.get("error").is_none(), "error event: {e}");
        for c in v["choices"].as_array().unwrap() {
            if let Some(a) = c.get("token_ids").and_then(Value::as_array) {
                ids.extend(a.iter().map(|i| i.as_u64().unwrap() as u32));
            }
            if let Some(f) = c["finish_reason"].as_str() {
                finish = Some(f.to_string());
            }
        }
    }
    (ids, finish, done)
}
