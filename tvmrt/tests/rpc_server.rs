//! `tvmrt rpc-server` against hostile and unlucky clients, as a network would meet it: raw
//! protocol bytes for handshakes no TVM client would send, this runtime's own client for
//! sessions, a tracker played by the test that drops the server and comes back. After each
//! attack the server must still serve the next client, and nothing outside a session's work
//! directory may be created, read, listed or removed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::{registry, ArgsBuilder, PackedFunc, RetValue};
use tvm_runtime::rpc::handshake::{client_hello, RPC_MAGIC};
use tvm_runtime::rpc::packet::{Packet, PROTOCOL_VERSION};

/// A server process on a port of the system's choosing, its output collected.
struct Server {
    child: Child,
    port: u16,
    work: PathBuf,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(tag: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let work = std::env::temp_dir().join(format!("tvmrt-rpcsrv-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tvmrt"));
        cmd.args(["rpc-server", "--host", "127.0.0.1", "--port", "0", "--port-end", "1", "--work-dir"])
            .arg(&work)
            .args(extra)
            .env("TVM_NUM_THREADS", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        out.read_line(&mut banner).unwrap();
        let port = banner.split("127.0.0.1:").nth(1).and_then(|r| r.split(',').next()).and_then(|p| p.parse().ok());
        let port = port.unwrap_or_else(|| panic!("no port in the banner: {banner}"));
        let lines = Arc::new(Mutex::new(vec![banner]));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Server { child, port, work, lines }
    }

    fn said(&self, what: &str) -> bool {
        self.lines.lock().unwrap().iter().any(|l| l.contains(what))
    }

    fn wait_until_said(&self, what: &str, within: Duration) {
        let start = Instant::now();
        while !self.said(what) {
            assert!(start.elapsed() < within, "the server never said '{what}': {:?}", self.lines.lock().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn session_dir(&self) -> PathBuf {
        let dirs: Vec<PathBuf> = std::fs::read_dir(&self.work)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("session-"))
            .collect();
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        dirs[0].clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

fn global(name: &str) -> ObjRef<PackedFunc> {
    tvm_runtime::init();
    registry::get(name).unwrap_or_else(|| panic!("no global {name}"))
}

/// A session of this runtime's client with the server at `port`.
fn connect(port: u16, key: &str) -> tvm_runtime::Result<ObjRef<Module>> {
    let mut a = ArgsBuilder::new();
    a.str("127.0.0.1").int(i64::from(port)).str(key);
    global("rpc.Connect").call(&a.args())?.into_object::<Module>()
}

fn call(session: &ObjRef<Module>, name: &str, build: impl FnOnce(&mut ArgsBuilder)) -> tvm_runtime::Result<RetValue> {
    let f = Module::get_function(session, name, true)?.unwrap_or_else(|| panic!("no remote function {name}"));
    let mut a = ArgsBuilder::new();
    build(&mut a);
    f.call(&a.args())
}

/// The server serves a session: a call there answers.
fn served(port: u16, key: &str) {
    let s = connect(port, key).unwrap_or_else(|e| panic!("the next client was not served: {e}"));
    let RetValue::Str(p) = call(&s, "tvm.rpc.server.workpath", |a| {
        a.str("probe");
    })
    .unwrap() else {
        panic!("a path")
    };
    assert!(p.ends_with("/probe"), "{p}");
}

/// A folder outside every work directory, with a file in it.
fn outside(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tvmrt-outside-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("secret"), b"secret").unwrap();
    dir
}

fn refused(r: tvm_runtime::Result<RetValue>, what: &str) {
    let e = r.map(|_| ()).expect_err(what).to_string();
    assert!(e.contains("not a path inside") || e.contains("does not unpack"), "{what}: {e}");
}

#[test]
fn handshake_options_out_of_range_are_refused_and_the_server_serves_on() {
    let mut server = Server::start("options", &["--key", "k"], &[]);
    for bad in ["inf", "-inf", "nan", "1e20", "18446744073709551616", "-1", "0", "abc", "1e400"] {
        let mut c = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(&client_hello(&format!("k -timeout={bad}"))).unwrap();
        let mut reply = [0u8; 16];
        c.read_exact(&mut reply).unwrap_or_else(|e| panic!("{bad}: {e}"));
        assert_eq!(&reply[..4], &RPC_MAGIC.to_le_bytes(), "{bad}: the handshake is answered");
        // The client's first packet is answered with the reason, which its connect raises.
        c.write_all(&Packet::InitServer { version: PROTOCOL_VERSION.into(), args: vec![] }.encode()).unwrap();
        let mut len = [0u8; 8];
        c.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; u64::from_le_bytes(len) as usize];
        c.read_exact(&mut body).unwrap();
        let Packet::Exception(msg) = Packet::decode(&body).unwrap() else { panic!("{bad}: an exception") };
        assert!(msg.contains(&format!("-timeout={bad}")), "{bad}: {msg}");
        drop(c);
        assert!(server.alive(), "{bad} ended the server");
        served(server.port, "k");
    }
    // The library's client says so too.
    let e = connect(server.port, "k -timeout=inf").unwrap_err().to_string();
    assert!(e.contains("RPCSessionRefused") && e.contains("-timeout=inf"), "{e}");
    served(server.port, "k -timeout=30");
    assert!(server.said("refused: -timeout=inf"));
}

#[test]
fn a_refused_client_that_stays_connected_holds_nobody() {
    let mut server = Server::start("refused-stays", &["--key", "k"], &[]);
    // Refused clients that send nothing more and never close, again and again.
    let mut held = Vec::new();
    for _ in 0..5 {
        let mut c = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        c.write_all(&client_hello("k -timeout=inf")).unwrap();
        let mut reply = [0u8; 16];
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.read_exact(&mut reply).unwrap();
        held.push(c);
    }
    // Each was answered in full at once: the refusal is waiting to be read, without an init packet.
    let mut len = [0u8; 8];
    held[0].read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u64::from_le_bytes(len) as usize];
    held[0].read_exact(&mut body).unwrap();
    assert!(matches!(Packet::decode(&body).unwrap(), Packet::Exception(m) if m.contains("-timeout=inf")));
    let start = Instant::now();
    served(server.port, "k");
    assert!(start.elapsed() < Duration::from_secs(2), "served after {:?}", start.elapsed());
    // And the server let them go: each reads the end of the stream within the linger.
    for mut c in held.into_iter().skip(1) {
        let mut rest = Vec::new();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = c.read_to_end(&mut rest);
        assert!(!rest.is_empty(), "the refusal was sent");
    }
    assert!(server.alive());
}

#[test]
fn a_client_dribbling_its_handshake_blocks_nobody() {
    let mut server = Server::start("dribble", &[], &[("TVM_RT_RPC_HANDSHAKE_MS", "3000")]);
    let port = server.port;
    let slow = std::thread::spawn(move || {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let hello = client_hello("");
        let start = Instant::now();
        // A byte every 400 ms: the whole handshake would take seconds more than it may.
        for b in &hello {
            if c.write_all(std::slice::from_ref(b)).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(400));
        }
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = [0u8; 4];
        let closed = matches!(c.read(&mut got), Ok(0) | Err(_));
        (closed, start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let start = Instant::now();
    served(server.port, "");
    assert!(start.elapsed() < Duration::from_secs(2), "served after {:?}", start.elapsed());
    let (closed, after) = slow.join().unwrap();
    assert!(closed, "the dribbler was answered");
    assert!(after < Duration::from_secs(8), "the dribbler was held {after:?}");
    assert!(server.said("no handshake within"));
    assert!(server.alive());
    served(server.port, "");
}

/// A tar archive's header block for a member (ustar, checksum filled).
fn tar_header(name: &str, kind: u8, size: usize, link: &str) -> Vec<u8> {
    let mut h = vec![0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    h
}

fn tar_of(members: &[(&str, u8, &[u8], &str)]) -> Vec<u8> {
    let mut a = Vec::new();
    for (name, kind, data, link) in members {
        a.extend(tar_header(name, *kind, data.len(), link));
        a.extend_from_slice(data);
        a.resize(a.len().div_ceil(512) * 512, 0);
    }
    a.resize(a.len() + 1024, 0);
    a
}

fn upload(s: &ObjRef<Module>, name: &str, bytes: &[u8]) -> tvm_runtime::Result<RetValue> {
    call(s, "tvm.rpc.server.upload", |a| {
        a.str(name).bytes(bytes);
    })
}

fn load_module(s: &ObjRef<Module>, name: &str) -> tvm_runtime::Result<RetValue> {
    let mut a = ArgsBuilder::new();
    a.object(s.clone().into_any()).str(name);
    global("rpc.LoadRemoteModule").call(&a.args())
}

fn listdir(s: &ObjRef<Module>, name: &str) -> tvm_runtime::Result<String> {
    match call(s, "tvm.rpc.server.listdir", |a| {
        a.str(name);
    })? {
        RetValue::Str(s) => Ok(s),
        other => panic!("{other:?}"),
    }
}

#[test]
fn archives_with_links_or_climbing_names_are_refused() {
    let server = Server::start("tar", &[], &[]);
    let out = outside("tar");
    let s = connect(server.port, "").unwrap();
    let target = out.to_str().unwrap();
    let cases: [(&str, u8, &str, &str); 6] = [
        ("esc", b'2', target, "symbolic link"),
        ("hard", b'1', "/etc/passwd", "hard link"),
        ("dev", b'3', "", "device"),
        ("/tmp/abs.o", b'0', "", "absolute"),
        ("../up.o", b'0', "", "'..'"),
        ("d/../../up.o", b'0', "", "'..'"),
    ];
    for (i, (name, kind, link, why)) in cases.into_iter().enumerate() {
        let archive = tar_of(&[("ok.o", b'0', b"\x7fELF", ""), (name, kind, b"", link)]);
        let file = format!("x{i}.tar");
        upload(&s, &file, &archive).unwrap();
        let e = load_module(&s, &file).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains("does not unpack"), "{why}: {e}");
        // Nothing was unpacked, inside or out.
        let listed = listdir(&s, "").unwrap();
        assert!(!listed.contains(".parts"), "{why}: {listed}");
    }
    assert!(!Path::new("/tmp/abs.o").exists());
    assert!(!server.work.parent().unwrap().join("up.o").exists());
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1, "nothing created outside");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn object_files_alone_or_in_a_gzipped_tar_are_linked_and_loaded() {
    let server = Server::start("link", &[], &[]);
    let dir = outside("link");
    // A packed function, as a kernel library exports them.
    let src = dir.join("f.c");
    std::fs::write(
        &src,
        "typedef union { long long v_int64; double v_float64; void* v_handle; } V;\n\
         int answer(V* a, int* c, int n, V* ret, int* rc, void* r) { ret->v_int64 = 42; *rc = 0; return 0; }\n",
    )
    .unwrap();
    assert!(Command::new("cc")
        .args(["-c", "-fPIC", "-o"])
        .arg(dir.join("lib0.o"))
        .arg(&src)
        .status()
        .unwrap()
        .success());
    // As TVM's `tar` helper writes it: gzip-compressed, by the system's tar.
    let tgz = dir.join("mod.tar");
    assert!(Command::new("tar").arg("-czf").arg(&tgz).arg("-C").arg(&dir).arg("lib0.o").status().unwrap().success());
    let s = connect(server.port, "").unwrap();
    upload(&s, "mod.tar", &std::fs::read(&tgz).unwrap()).unwrap();
    let m = load_module(&s, "mod.tar").unwrap().into_object::<Module>().unwrap();
    let f = Module::get_function(&m, "answer", false).unwrap().expect("the linked function");
    assert!(matches!(f.call(&ArgsBuilder::new().args()).unwrap(), RetValue::Int(42)));
    // One object file, as `export_library` writes for a cross build.
    upload(&s, "one.o", &std::fs::read(dir.join("lib0.o")).unwrap()).unwrap();
    let m = load_module(&s, "one.o").unwrap().into_object::<Module>().unwrap();
    let f = Module::get_function(&m, "answer", false).unwrap().expect("the linked function");
    assert!(matches!(f.call(&ArgsBuilder::new().args()).unwrap(), RetValue::Int(42)));
    assert!(listdir(&s, "").unwrap().contains("one.so"), "linked beside it");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn links_planted_in_the_work_directory_are_not_followed() {
    let server = Server::start("planted", &[], &[]);
    let out = outside("planted");
    let s = connect(server.port, "").unwrap();
    upload(&s, "mine.bin", b"mine").unwrap();
    // A link in the session's folder, as a bug elsewhere (or another user) could leave one.
    let session = server.session_dir();
    std::os::unix::fs::symlink(&out, session.join("esc")).unwrap();
    std::os::unix::fs::symlink(out.join("secret"), session.join("secret-link")).unwrap();
    std::os::unix::fs::symlink(out.join("secret"), session.join("secret.so")).unwrap();
    refused(upload(&s, "esc/planted", b"x"), "upload through a link");
    refused(
        call(&s, "tvm.rpc.server.download", |a| {
            a.str("esc/secret");
        }),
        "download through a link",
    );
    refused(
        call(&s, "tvm.rpc.server.download", |a| {
            a.str("secret-link");
        }),
        "download of a link",
    );
    refused(listdir(&s, "esc").map(RetValue::Str), "listdir through a link");
    refused(
        call(&s, "tvm.rpc.server.remove", |a| {
            a.str("esc/secret");
        }),
        "remove through a link",
    );
    refused(load_module(&s, "secret.so"), "load through a link");
    // Removing the link removes the link.
    call(&s, "tvm.rpc.server.remove", |a| {
        a.str("esc");
    })
    .unwrap();
    assert_eq!(std::fs::read(out.join("secret")).unwrap(), b"secret");
    assert!(!out.join("planted").exists());
    let RetValue::Bytes(b) = call(&s, "tvm.rpc.server.download", |a| {
        a.str("mine.bin");
    })
    .unwrap() else {
        panic!()
    };
    assert_eq!(b, b"mine");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn path_taking_globals_are_confined_to_the_session() {
    let server = Server::start("globals", &[], &[]);
    let out = outside("globals");
    let s = connect(server.port, "").unwrap();
    let secret = out.join("secret").display().to_string();
    let beside = out.join("written").display().to_string();
    for name in ["../secret", secret.as_str(), "/etc/passwd"] {
        refused(upload(&s, name, b"x"), "upload");
        refused(
            call(&s, "tvm.rpc.server.download", |a| {
                a.str(name);
            }),
            "download",
        );
        refused(
            call(&s, "tvm.rpc.server.remove", |a| {
                a.str(name);
            }),
            "remove",
        );
        refused(listdir(&s, name).map(RetValue::Str), "listdir");
        refused(
            call(&s, "runtime.LoadParamsFromFile", |a| {
                a.str(name);
            }),
            "LoadParamsFromFile",
        );
        refused(
            call(&s, "runtime.ModuleLoadFromFile", |a| {
                a.str(name).str("so");
            }),
            "ModuleLoadFromFile",
        );
        refused(
            call(&s, "runtime.module.loadfile_so", |a| {
                a.str(name);
            }),
            "loadfile_so",
        );
    }
    refused(
        call(&s, "tvmrt.opencl.SetProgramCache", |a| {
            a.str(&out.display().to_string());
        }),
        "SetProgramCache",
    );
    // Inside the work directory, the same globals work.
    call(&s, "tvmrt.opencl.SetProgramCache", |a| {
        a.str("cache");
    })
    .unwrap();
    call(&s, "tvmrt.opencl.SetProgramCache", |a| {
        a.str("");
    })
    .unwrap();
    // An executor's mapped params: the model's library uploaded and loaded, params from outside
    // refused.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/mlp_unbound_b1");
    upload(&s, "lib.so", &std::fs::read(fixtures.join("lib.so")).unwrap()).unwrap();
    upload(&s, "params.bin", &std::fs::read(fixtures.join("params.bin")).unwrap()).unwrap();
    let lib = load_module(&s, "lib.so").unwrap().into_object::<Module>().unwrap();
    let graph = std::fs::read_to_string(fixtures.join("graph.json")).unwrap();
    let ex = call(&s, "tvm.graph_executor.create", |a| {
        a.str(&graph).object(lib.into_any()).int(1).int(0);
    })
    .unwrap()
    .into_object::<Module>()
    .unwrap();
    let load = Module::get_function(&ex, "load_params_from_file", false).unwrap().unwrap();
    let mut a = ArgsBuilder::new();
    a.str(&secret);
    refused(load.call(&a.args()), "load_params_from_file");
    let mut a = ArgsBuilder::new();
    a.str("params.bin");
    load.call(&a.args()).expect("params inside the work directory");
    // Params saved: refused outside, written inside.
    let get = Module::get_function(&ex, "get_input", false).unwrap().unwrap();
    let mut a = ArgsBuilder::new();
    a.int(1);
    let RetValue::Object(weight) = get.call(&a.args()).unwrap() else { panic!("an array") };
    let RetValue::Object(map) = call(&s, "runtime.Map", |a| {
        a.str("w").object(weight);
    })
    .unwrap() else {
        panic!("a map")
    };
    refused(
        call(&s, "runtime.SaveParamsToFile", |a| {
            a.object(map.clone()).str(&beside);
        }),
        "SaveParamsToFile",
    );
    call(&s, "runtime.SaveParamsToFile", |a| {
        a.object(map).str("saved.params");
    })
    .unwrap();
    assert!(listdir(&s, "").unwrap().contains("saved.params"));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1, "nothing created outside");
    assert_eq!(std::fs::read(out.join("secret")).unwrap(), b"secret");
    std::fs::remove_dir_all(&out).unwrap();
}

/// Plays a tracker for one connection: the magic, then each request answered (`PUT`s recorded);
/// returns when the server's connection closes or `stop` is set.
fn tracker_conversation(mut c: TcpStream, puts: Arc<Mutex<Vec<String>>>, stop: Arc<Mutex<bool>>) {
    c.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut magic = [0u8; 4];
    let start = Instant::now();
    while c.read_exact(&mut magic).is_err() {
        if start.elapsed() > Duration::from_secs(5) {
            return;
        }
    }
    c.write_all(&magic).unwrap();
    loop {
        if *stop.lock().unwrap() {
            return;
        }
        let mut len = [0u8; 4];
        match c.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                continue
            }
            Err(_) => return,
        }
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut body = vec![0u8; i32::from_le_bytes(len) as usize];
        c.read_exact(&mut body).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let msg: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let reply = match msg[0].as_i64() {
            Some(3) => {
                puts.lock().unwrap().push(msg[2][1].as_str().unwrap().to_string());
                "0".to_string()
            }
            Some(7) => serde_json::to_string(&*puts.lock().unwrap()).unwrap(),
            _ => "0".to_string(),
        };
        let framed = [&(reply.len() as i32).to_le_bytes()[..], reply.as_bytes()].concat();
        if c.write_all(&framed).is_err() {
            return;
        }
    }
}

#[test]
fn a_tracker_that_restarts_gets_the_server_back() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::start("tracker", &["--key", "dev", "--tracker", &addr.to_string()], &[]);
    // The first tracker: takes the registration and the offer, then goes away entirely.
    let puts = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(Mutex::new(false));
    let (c, _) = listener.accept().unwrap();
    let (p, st) = (puts.clone(), stop.clone());
    let first = std::thread::spawn(move || tracker_conversation(c, p, st));
    let start = Instant::now();
    while puts.lock().unwrap().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "no offer");
        std::thread::sleep(Duration::from_millis(20));
    }
    *stop.lock().unwrap() = true;
    first.join().unwrap();
    drop(listener);
    server.wait_until_said("no tracker connection", Duration::from_secs(10));
    // The server goes on serving its current offer directly meanwhile.
    let key = puts.lock().unwrap()[0].clone();
    served(server.port, &key);
    // The tracker comes back on the same address: the server registers again and offers a
    // session, which a client holding that key is served.
    std::thread::sleep(Duration::from_millis(500));
    let listener = TcpListener::bind(addr).unwrap();
    let puts = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(Mutex::new(false));
    let (c, _) = listener.accept().unwrap();
    let (p, st) = (puts.clone(), stop.clone());
    let second = std::thread::spawn(move || tracker_conversation(c, p, st));
    let start = Instant::now();
    while puts.lock().unwrap().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "no offer after the restart");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.wait_until_said("registered with the tracker", Duration::from_secs(5));
    assert!(server.said("again"), "{:?}", server.lines.lock().unwrap());
    let key = puts.lock().unwrap()[0].clone();
    assert!(key.starts_with("dev:"), "{key}");
    served(server.port, &key);
    *stop.lock().unwrap() = true;
    second.join().unwrap();
}

#[test]
fn stopping_the_server_frees_its_port_and_work_directory_at_once() {
    let mut server = Server::start("stop", &[], &[]);
    let s = connect(server.port, "").unwrap();
    upload(&s, "f.bin", b"data").unwrap();
    assert!(server.session_dir().join("f.bin").exists());
    // SAFETY: a child of this test.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    while server.alive() {
        assert!(start.elapsed() < Duration::from_secs(2), "still running");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(start.elapsed() < Duration::from_secs(1), "took {:?} to stop", start.elapsed());
    assert!(!server.work.exists(), "the work directory is left");
    TcpListener::bind(("127.0.0.1", server.port)).expect("the port is free while the client is still connected");
    // The session went with the server.
    assert!(upload(&s, "g.bin", b"x").is_err());
}
