//! `toy serve` end to end: the built binary starts, prints its URL, answers over HTTP, and
//! refuses to start on a missing model with a clear error; a qwen35 hybrid's LoRA is served
//! unmerged and answers as `toy generate --lora` does.

mod common;
#[path = "../../toy/tests/common/hybrid.rs"]
mod hybrid;
#[path = "../../toy/tests/common/synthetic.rs"]
mod synthetic;

use common::{arg, model, model_path, toy_json, TempDir};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// The server process, killed when the test ends however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tests of this file start servers side by side: one binds port 0 and another picks a free
/// port and binds it a moment later, so the first can be handed the port the second picked
/// (and the second would then talk to the first). One server at a time.
static ONE_SERVER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_server() -> std::sync::MutexGuard<'static, ()> {
    ONE_SERVER.lock().unwrap_or_else(|e| e.into_inner())
}

/// One HTTP/1.1 exchange; returns the status and the body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    try_http(addr, method, path, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// One HTTP/1.1 exchange, or why it did not happen.
fn try_http(addr: &str, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .map_err(|e| format!("read: {e}"))?;
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line in {out:?}"))?;
    let body = out.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    Ok((status, body))
}

/// `toy serve ARGS --port 0` and the address it prints.
fn serve(args: &[String], runs: &std::path::Path) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toy"))
        .args(["-t", "2", "serve", "--port", "0"])
        .args(args)
        .arg("--runs-dir")
        .arg(runs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toy serve starts");
    let stdout = child.stdout.take().unwrap();
    let server = Running(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    assert!(addr.starts_with("127.0.0.1:"), "binds loopback: {line}");
    (server, addr)
}

#[test]
fn serve_prints_its_url_and_answers_openai_requests() {
    let _one = one_server();
    let runs = std::env::temp_dir().join(format!("toy-cli-serve-{}", std::process::id()));
    let args = ["-m", &model(), "--parallel", "2"].map(String::from);
    let (server, addr) = serve(&args, &runs);
    assert_eq!(http(&addr, "GET", "/health", "").0, 200);
    let body = r#"{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0}"#;
    let (status, answer) = http(&addr, "POST", "/v1/chat/completions", body);
    assert_eq!(status, 200, "{answer}");
    let v: serde_json::Value = serde_json::from_str(&answer).expect("JSON answer");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    drop(server);
    let _ = std::fs::remove_dir_all(runs);
}

#[test]
fn serve_without_its_model_fails_clearly() {
    let out = Command::new(env!("CARGO_BIN_EXE_toy"))
        .args(["serve", "-m", "no/such/model.gguf", "--port", "0"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no/such/model.gguf") && err.contains("not found"),
        "{err}"
    );
}

#[test]
fn serve_keeps_serving_when_nobody_reads_its_output() {
    // a closed stdout made the URL line panic (println!), which killed the server
    let _one = one_server();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let runs = std::env::temp_dir().join(format!("toy-cli-serve-closed-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_toy"))
        .args(["-t", "2", "serve", "-m", &model(), "--parallel", "1"])
        .args(["--port", &port.to_string()])
        .arg("--runs-dir")
        .arg(&runs)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("toy serve starts");
    drop(child.stdout.take());
    let mut server = Running(child);
    let addr = format!("127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // a bare connect is not proof of a listener (a client socket on the port can connect to
    // itself): wait for an HTTP answer from /health
    while try_http(&addr, "GET", "/health", "").map(|r| r.0) != Ok(200) {
        assert!(
            server.0.try_wait().expect("status").is_none(),
            "toy serve exited"
        );
        assert!(std::time::Instant::now() < deadline, "never listened");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let body = r#"{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"temperature":0}"#;
    let (status, answer) = http(&addr, "POST", "/v1/chat/completions", body);
    assert_eq!(status, 200, "{answer}");
    assert!(
        server.0.try_wait().expect("status").is_none(),
        "still running"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(runs);
}

/// A random rank-4 adapter (B nonzero) on every LoRA target of each layer of a qwen35 file:
/// the GDN layers' projections and the attention layers' alike.
fn hybrid_adapter(base: &toy::gguf::GgufFile) -> toy::finetune::adapter::LoraAdapter {
    use toy::finetune::adapter::{LoraAdapter, LoraTensor};
    let parts = toy::model::tensors::part_names(toy::model::Arch::Qwen35);
    let mut rng = synthetic::Rng(0x2545_f491_4f6c_dd1d);
    let tensors = base
        .tensors
        .iter()
        .filter(|t| {
            let part = t.name.split('.').nth(2).unwrap_or("");
            t.name.starts_with("blk.") && t.dims.len() == 2 && parts.contains(&part)
        })
        .map(|t| {
            let (n_in, n_out, rank) = (t.dims[0] as usize, t.dims[1] as usize, 4);
            LoraTensor {
                base: t.name.clone(),
                n_in,
                n_out,
                rank,
                a: (0..rank * n_in).map(|_| 0.3 * rng.next()).collect(),
                b: (0..n_out * rank).map(|_| 0.3 * rng.next()).collect(),
            }
        })
        .collect::<Vec<_>>();
    assert!(tensors.len() > 8, "adapter on {} matrices", tensors.len());
    LoraAdapter {
        arch: "qwen35".into(),
        alpha: 4.0,
        tensors,
    }
}

#[test]
fn a_hybrid_lora_is_served_unmerged_and_answers_as_toy_generate_does() {
    let _one = one_server();
    let dir = TempDir::new("serve-hybrid-lora");
    let smol = toy::gguf::GgufFile::open(&model_path()).expect("SmolLM2 opens");
    let mut spec = hybrid::tiny();
    spec.vocab = 49152;
    spec.ctx = 1024;
    let m = dir.write(
        "hybrid.gguf",
        hybrid::chat_gguf(&spec, &smol, tinynn::quant::GgmlType::Q8_0),
    );
    let base = toy::gguf::GgufFile::open(&m).expect("the hybrid opens");
    let lora = dir.path("lora.gguf");
    hybrid_adapter(&base)
        .write(&lora)
        .expect("writing the adapter");
    let prompt = "The capital of France is";
    let generate = |extra: &[&str]| {
        let mut a = vec!["generate", "-m", &m.to_str().unwrap(), "-p", prompt];
        a.extend_from_slice(&["-n", "12", "--temp", "0", "--json"]);
        a.extend_from_slice(extra);
        toy_json(&a)["text"].as_str().expect("text").to_string()
    };
    let want = generate(&["--lora", lora.to_str().unwrap()]);
    assert_ne!(want, generate(&[]), "the adapter changes the greedy text");

    let args = ["-m".into(), arg(&m), "--lora".into(), arg(&lora)];
    let (server, addr) = serve(&args, &dir.path("runs"));
    let complete = |scale: f32| {
        let body = serde_json::json!({"prompt": prompt, "max_tokens": 12, "temperature": 0,
            "lora": [{"id": 0, "scale": scale}]});
        let (status, answer) = http(&addr, "POST", "/v1/completions", &body.to_string());
        assert_eq!(status, 200, "{answer}");
        let v: serde_json::Value = serde_json::from_str(&answer).expect("JSON answer");
        v["choices"][0]["text"].as_str().expect("text").to_string()
    };
    assert_eq!(
        complete(1.0),
        want,
        "served with the adapter != toy generate --lora"
    );
    assert_eq!(complete(0.0), generate(&[]), "scale 0 is the base");
    drop(server);
}
