//! Shared helpers for the integration tests: the fixture manifests written by
//! scripts/make_fixtures.py, and running a model through the packed-function API.
#![allow(dead_code)]

pub mod shim;
pub mod sources;
pub mod vm;

use std::path::{Path, PathBuf};
use tvm_runtime::dlpack::{DLDataType, DLDevice};
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::{registry, ArgsBuilder, PackedFunc};

#[derive(Clone)]
pub struct Tensor {
    pub name: String,
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
    pub data: Vec<u8>,
}

pub struct Fixture {
    pub name: String,
    pub dir: PathBuf,
    pub factory_weights: bool,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
}

/// A path in the temporary folder, unique to this test process.
/// Whether an OpenCL device exists; fails when one is required (`TVM_RT_REQUIRE_OPENCL=1`, as CI
/// sets) and missing, else says the test is skipped.
pub fn have_opencl() -> bool {
    tvm_runtime::init();
    let n = tvm_runtime::device::api(4).and_then(|a| a.count()).unwrap_or(0);
    if n == 0 {
        assert!(
            std::env::var("TVM_RT_REQUIRE_OPENCL").map_or(true, |v| v != "1"),
            "TVM_RT_REQUIRE_OPENCL=1 but no OpenCL device: {:?}",
            tvm_runtime::device::api(4).and_then(|a| a.count()).err()
        );
        eprintln!("no OpenCL device: skipping (install pocl-opencl-icd)");
    }
    n > 0
}

pub fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tvmrt-{}-{name}", std::process::id()))
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

impl Fixture {
    pub fn load(name: &str) -> Fixture {
        tvm_runtime::init();
        let dir = fixtures_dir().join(name);
        let text = std::fs::read_to_string(dir.join("manifest.txt")).expect("manifest");
        let mut f =
            Fixture { name: name.into(), dir: dir.clone(), factory_weights: true, inputs: vec![], outputs: vec![] };
        for line in text.lines() {
            let tok: Vec<&str> = line.split_whitespace().collect();
            match tok.first().copied() {
                Some("factory_weights") => f.factory_weights = tok[1] == "yes",
                Some("input") => f.inputs.push(tensor(&dir, tok[1], &tok[2..])),
                Some("output") => {
                    let k = f.outputs.len();
                    f.outputs.push(tensor(&dir, &k.to_string(), &tok[1..]))
                }
                _ => {}
            }
        }
        f
    }

    /// Every model with a lib.so (the system-lib build has objects only), those TVM 0.19 built
    /// (tests/fixtures/tvm019) included.
    pub fn all() -> Vec<Fixture> {
        let list = |sub: &str| -> Vec<String> {
            std::fs::read_dir(fixtures_dir().join(sub))
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok())
                .filter(|e| e.path().join("lib.so").exists())
                .map(|e| format!("{sub}{}", e.file_name().to_string_lossy()))
                .collect()
        };
        let mut names: Vec<String> = list("");
        names.extend(list("tvm019/"));
        names.sort();
        names.iter().map(|n| Fixture::load(n)).collect()
    }

    pub fn lib_path(&self) -> String {
        self.dir.join("lib.so").to_string_lossy().into_owned()
    }

    pub fn graph_json(&self) -> String {
        std::fs::read_to_string(self.dir.join("graph.json")).unwrap()
    }

    pub fn params(&self) -> Vec<u8> {
        std::fs::read(self.dir.join("params.bin")).unwrap()
    }

    /// The params rewritten with every tensor 64-byte aligned (mappable in place), in a file of
    /// this test process named after `name`.
    pub fn aligned_params_file(&self, name: &str) -> PathBuf {
        let path = temp_path(name);
        std::fs::write(&path, tvm_runtime::params::align(&self.params()).unwrap()).unwrap();
        path
    }

    pub fn load_lib(&self) -> ObjRef<Module> {
        tvm_runtime::library::load_file(&self.lib_path(), "").unwrap()
    }

    /// The library loaded from a copy of its own: a file loaded twice is one loaded object, whose
    /// kernels keep the functions they looked up first (as with upstream's runtime), so a load
    /// whose modules must be fresh (nothing built, nothing looked up) needs its own file.
    pub fn load_lib_copy(&self) -> ObjRef<Module> {
        static LOADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copy = temp_path(&format!("{}_{n}.so", self.name.replace('/', "_")));
        std::fs::copy(self.lib_path(), &copy).unwrap();
        let lib = tvm_runtime::library::load_file(copy.to_str().unwrap(), "").unwrap();
        let _ = std::fs::remove_file(&copy);
        lib
    }

    /// An executor from the factory's `default` function.
    pub fn executor_from_factory(&self, lib: &ObjRef<Module>) -> ObjRef<Module> {
        self.executor_from_factory_on(lib, DLDevice::CPU)
    }

    /// An executor on `device` from the factory's `default` function, with the weights loaded.
    pub fn executor_from_factory_on(&self, lib: &ObjRef<Module>, device: DLDevice) -> ObjRef<Module> {
        let f = Module::get_function(lib, "default", false).unwrap().expect("default");
        let mut a = ArgsBuilder::new();
        a.device(device);
        let m = f.call(&a.args()).unwrap().into_object::<Module>().unwrap();
        if !self.factory_weights {
            exec(&m).load_params(&self.params()).unwrap();
        }
        m
    }

    /// An executor from `tvm.graph_executor.create`, with no weights loaded.
    pub fn executor_without_params(&self, lib: &ObjRef<Module>) -> ObjRef<Module> {
        self.executor_without_params_on(lib, DLDevice::CPU)
    }

    /// An executor on `device` from `tvm.graph_executor.create`, with no weights loaded.
    pub fn executor_without_params_on(&self, lib: &ObjRef<Module>, device: DLDevice) -> ObjRef<Module> {
        let create = registry::get("tvm.graph_executor.create").unwrap();
        let mut a = ArgsBuilder::new();
        a.str(&self.graph_json())
            .object(lib.clone().into_any())
            .int(device.device_type as i64)
            .int(device.device_id as i64);
        create.call(&a.args()).unwrap().into_object::<Module>().unwrap()
    }

    /// An executor from `tvm.graph_executor.create` plus `load_params`.
    pub fn executor_from_create(&self, lib: &ObjRef<Module>) -> ObjRef<Module> {
        let m = self.executor_without_params(lib);
        call(&m, "load_params", |a| {
            a.str("");
        })
        .unwrap_err();
        exec(&m).load_params(&self.params()).unwrap();
        m
    }

    pub fn set_inputs(&self, m: &ObjRef<Module>) {
        let ex = exec(m);
        for t in &self.inputs {
            let i = ex.plan().input_index(&t.name).unwrap();
            ex.set_input_bytes(i, &t.data).unwrap();
        }
    }

    /// Checks every output against upstream's, byte for byte.
    pub fn check_outputs(&self, m: &ObjRef<Module>, how: &str) {
        let ex = exec(m);
        assert_eq!(ex.plan().num_outputs(), self.outputs.len(), "{}: output count", self.name);
        for (k, want) in self.outputs.iter().enumerate() {
            let got = ex.output(k).unwrap();
            assert_eq!(got.shape(), &want.shape[..], "{} ({how}): output {k} shape", self.name);
            assert_eq!(got.dtype(), want.dtype, "{} ({how}): output {k} dtype", self.name);
            assert!(got.to_vec() == want.data, "{} ({how}): output {k} differs from upstream's", self.name);
        }
    }
}

fn tensor(dir: &Path, name: &str, tok: &[&str]) -> Tensor {
    let dtype: DLDataType = tok[0].parse().unwrap();
    let ndim: usize = tok[1].parse().unwrap();
    let shape: Vec<i64> = tok[2..2 + ndim].iter().map(|d| d.parse().unwrap()).collect();
    let file = tok[2 + ndim];
    Tensor { name: name.into(), dtype, shape, data: std::fs::read(dir.join(file)).unwrap() }
}

pub fn exec(m: &ObjRef<Module>) -> &GraphExecutor {
    m.node::<GraphExecutor>().expect("an executor module")
}

/// Maps the params file at `path` into `ex` (`load_params_mapped`).
pub fn load_mapped(ex: &GraphExecutor, path: &str) -> tvm_runtime::Result<(usize, usize)> {
    // SAFETY: the tests' own files, which nothing changes while they are mapped.
    let map = unsafe { tvm_runtime::tensor::FileMap::open(path) }?;
    ex.load_params_mapped(&map)
}

/// Calls executor function `name` with arguments built by `build`.
pub fn call(
    m: &ObjRef<Module>,
    name: &str,
    build: impl FnOnce(&mut ArgsBuilder),
) -> tvm_runtime::Result<tvm_runtime::packed::RetValue> {
    let f: ObjRef<PackedFunc> = Module::get_function(m, name, false)?.expect(name);
    let mut a = ArgsBuilder::new();
    build(&mut a);
    f.call(&a.args())
}

/// A library that answers `_lookup_linked_param(storage_id)` with weights it owns, as TVM 0.8
/// link-params builds do with constants inside their image (the weights live exactly as long as
/// the module); its other functions are the fixture's kernels. Also returns the weights' addresses.
pub fn linked_library(f: &Fixture) -> (ObjRef<Module>, Vec<usize>) {
    use std::collections::HashMap;
    use std::sync::Arc;
    use tvm_runtime::module::ModuleNode;
    use tvm_runtime::packed::RetValue;
    use tvm_runtime::tensor::Buffer;

    struct Linked {
        code: ObjRef<Module>,
        by_sid: Arc<HashMap<i64, Buffer>>,
    }
    impl ModuleNode for Linked {
        fn type_key(&self) -> &str {
            "library"
        }
        fn get_function(&self, _: &ObjRef<Module>, name: &str) -> tvm_runtime::Result<Option<ObjRef<PackedFunc>>> {
            if name == "_lookup_linked_param" {
                let by_sid = self.by_sid.clone();
                // SAFETY: the handles address buffers this module owns (behind an Arc the function
                // holds), never written, alive at least as long as the module.
                return Ok(Some(unsafe {
                    PackedFunc::native_trusted(move |a| {
                        Ok(by_sid.get(&a.int(0)?).map_or(RetValue::None, |b| RetValue::Handle(b.as_ptr().cast())))
                    })
                }));
            }
            Module::get_function(&self.code, name, true)
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    let graph = tvm_runtime::graph::Graph::parse(&f.graph_json()).unwrap();
    let blob = f.params();
    let mut by_sid = HashMap::new();
    for (name, rec) in tvm_runtime::params::parse(&blob).unwrap() {
        let node = graph.arg_nodes.iter().copied().find(|&n| graph.nodes[n].name == name).unwrap();
        by_sid.insert(graph.entries[graph.entry_id(node, 0)].storage_id as i64, Buffer::from_bytes(rec.data).unwrap());
    }
    let pointers = by_sid.values().map(|b| b.as_ptr() as usize).collect();
    (Module::new(Linked { code: f.load_lib(), by_sid: Arc::new(by_sid) }), pointers)
}
