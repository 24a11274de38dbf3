//! The Relay VM fixtures (tests/fixtures/vm, made by scripts/make_vm_fixtures.sh with each
//! compiler's own VM computing the references) and running them through the VM's functions.

use super::*;
use std::path::{Path, PathBuf};
use tvm_runtime::module::Module;
use tvm_runtime::object::{AnyObject, ObjRef};
use tvm_runtime::packed::RetValue;
use tvm_runtime::tensor::NDArray;
use tvm_runtime::vm::objects::AdtObj;

pub const VERSIONS: [&str; 4] = ["0.8", "0.9", "0.16", "0.19"];

pub struct Case {
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
    pub structure: String,
}

pub struct VmFixture {
    pub dir: PathBuf,
    pub params: Vec<String>,
    pub cases: Vec<Case>,
}

pub fn dims(tok: &[&str]) -> (Vec<i64>, usize) {
    let n: usize = tok[0].parse().unwrap();
    (tok[1..1 + n].iter().map(|d| d.parse().unwrap()).collect(), 1 + n)
}

pub fn load_vm_fixture(dir: &Path) -> VmFixture {
    tvm_runtime::init();
    let text = std::fs::read_to_string(dir.join("manifest.txt")).unwrap();
    let mut f = VmFixture { dir: dir.to_path_buf(), params: vec![], cases: vec![] };
    for line in text.lines() {
        let tok: Vec<&str> = line.split_whitespace().collect();
        match tok.first().copied() {
            Some("params") => f.params = tok[1..].iter().map(|s| s.to_string()).collect(),
            Some("case") => f.cases.push(Case { inputs: vec![], outputs: vec![], structure: String::new() }),
            Some("input") => {
                let (shape, used) = dims(&tok[3..]);
                let t = Tensor {
                    name: tok[1].into(),
                    dtype: tok[2].parse().unwrap(),
                    shape,
                    data: std::fs::read(dir.join(tok[3 + used])).unwrap(),
                };
                f.cases.last_mut().unwrap().inputs.push(t);
            }
            Some("output") => {
                let (shape, used) = dims(&tok[2..]);
                let t = Tensor {
                    name: String::new(),
                    dtype: tok[1].parse().unwrap(),
                    shape,
                    data: std::fs::read(dir.join(tok[2 + used])).unwrap(),
                };
                f.cases.last_mut().unwrap().outputs.push(t);
            }
            Some("structure") => f.cases.last_mut().unwrap().structure = tok[1].to_string(),
            _ => {}
        }
    }
    f
}

pub fn vm_fixtures() -> Vec<VmFixture> {
    let mut out = vec![];
    for v in VERSIONS {
        let root = fixtures_dir().join("vm").join(v);
        let mut names: Vec<_> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        out.extend(names.iter().map(|d| load_vm_fixture(d)));
    }
    out
}

pub fn load_one_file(dir: &Path) -> ObjRef<Module> {
    tvm_runtime::library::load_file(dir.join("vm.so").to_str().unwrap(), "so").unwrap()
}

pub fn load_split(dir: &Path) -> ObjRef<Module> {
    let lib = tvm_runtime::library::load_file(dir.join("lib.so").to_str().unwrap(), "so").unwrap();
    tvm_runtime::vm::load_executable(&std::fs::read(dir.join("code.ro")).unwrap(), Some(lib)).unwrap()
}

/// A VM of `exe` on the CPU (pooled allocator), or on OpenCL and the CPU.
pub fn make_vm(exe: &ObjRef<Module>, opencl: bool) -> ObjRef<Module> {
    let vm: ObjRef<Module> = call(exe, "vm_load_executable", |_| {}).unwrap().into_object().unwrap();
    call(&vm, "init", |a| {
        if opencl {
            a.int(4).int(0).int(2);
        }
        a.int(1).int(0).int(2);
    })
    .unwrap();
    vm
}

pub fn host_array(t: &Tensor) -> ObjRef<NDArray> {
    NDArray::from_bytes(&t.shape, t.dtype, &t.data).unwrap()
}

/// The result's tensors in order (tuples flattened) and its nesting.
pub fn flatten(o: &AnyObject, out: &mut Vec<ObjRef<NDArray>>) -> String {
    if let Some(adt) = o.downcast_ref::<AdtObj>() {
        return format!("({})", adt.fields().iter().map(|f| flatten(f, out)).collect::<String>());
    }
    out.push(o.downcast_ref::<NDArray>().expect("a tensor"));
    "t".into()
}

pub fn invoke(vm: &ObjRef<Module>, inputs: &[Tensor]) -> tvm_runtime::Result<AnyObject> {
    call(vm, "set_input", |a| {
        a.str("main");
        for t in inputs {
            a.object(host_array(t).into_any());
        }
    })?;
    match call(vm, "invoke", |a| {
        a.str("main");
    })? {
        RetValue::Object(o) => Ok(o),
        other => panic!("invoke returned {other:?}"),
    }
}

/// `invoke` with the caller's tensors bound as the function's outputs first (`set_outputs`).
pub fn invoke_into(
    vm: &ObjRef<Module>,
    inputs: &[Tensor],
    outputs: &[ObjRef<NDArray>],
) -> tvm_runtime::Result<AnyObject> {
    call(vm, "set_outputs", |a| {
        a.str("main");
        for t in outputs {
            a.object(t.clone().into_any());
        }
    })?;
    invoke(vm, inputs)
}

pub fn check(what: &str, result: &AnyObject, case: &Case) {
    let mut got = vec![];
    let structure = flatten(result, &mut got);
    assert_eq!(structure, case.structure, "{what}: the result's nesting");
    assert_eq!(got.len(), case.outputs.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(&case.outputs).enumerate() {
        assert_eq!((g.shape(), g.dtype()), (&w.shape[..], w.dtype), "{what}: output {k}");
        assert!(g.to_vec() == w.data, "{what}: output {k} differs from the compiler's own VM");
    }
}

pub fn mlp_code() -> (Vec<u8>, ObjRef<Module>) {
    let dir = fixtures_dir().join("vm/0.16/mlp_dyn");
    tvm_runtime::init();
    let lib = tvm_runtime::library::load_file(dir.join("lib.so").to_str().unwrap(), "so").unwrap();
    (std::fs::read(dir.join("code.ro")).unwrap(), lib)
}

/// Rewrites the bytecode with `edit` applied to function 0's instructions (hashes kept right).
pub fn edited(code: &[u8], edit: impl FnOnce(&mut Vec<tvm_runtime::vm::code::Instr>)) -> Vec<u8> {
    let mut image = tvm_runtime::vm::image::read(code).unwrap();
    edit(&mut image.functions[0].code);
    tvm_runtime::vm::image::write(&image)
}
