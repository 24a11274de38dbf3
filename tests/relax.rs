//! Relax VM executables of TVM 0.19, 0.21, 0.25, 0.26 and 0.27 (tests/fixtures/relax, made by
//! scripts/make_relax_fixtures.sh): every case's outputs byte-equal to what that version's own
//! runtime computed, through the executable's and the VM's functions as hosts call them.

mod common;

use common::vm::{host_array, load_vm_fixture, VmFixture};
use common::{call, fixtures_dir};
use std::path::Path;
use tvm_runtime::module::Module;
use tvm_runtime::object::{AnyObject, ObjRef};
use tvm_runtime::packed::{ArrayObj, RetValue};
use tvm_runtime::tensor::NDArray;

const VERSIONS: [&str; 5] = ["0.19", "0.21", "0.25", "0.26", "0.27"];

fn fixtures() -> Vec<VmFixture> {
    let mut out = vec![];
    for v in VERSIONS {
        let root = fixtures_dir().join("relax").join(v);
        let mut names: Vec<_> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        out.extend(names.iter().map(|d| load_vm_fixture(d)));
    }
    assert_eq!(out.len(), 30, "six models of five versions");
    out
}

fn load(dir: &Path) -> ObjRef<Module> {
    tvm_runtime::library::load_file(dir.join("model.so").to_str().unwrap(), "so").unwrap()
}

fn make_vm(exe: &ObjRef<Module>) -> ObjRef<Module> {
    let vm: ObjRef<Module> = call(exe, "vm_load_executable", |_| {}).unwrap().into_object().unwrap();
    call(&vm, "vm_initialization", |a| {
        a.int(1).int(0).int(2);
    })
    .unwrap();
    vm
}

fn flatten(o: &AnyObject, out: &mut Vec<ObjRef<NDArray>>) -> String {
    if let Some(arr) = o.downcast_ref::<ArrayObj>() {
        return format!("({})", arr.items().iter().map(|f| flatten(f, out)).collect::<String>());
    }
    out.push(o.downcast_ref::<NDArray>().expect("a tensor"));
    "t".into()
}

fn run_main(vm: &ObjRef<Module>, inputs: &[common::Tensor]) -> tvm_runtime::Result<RetValue> {
    call(vm, "main", |a| {
        for t in inputs {
            a.object(host_array(t).into_any());
        }
    })
}

fn check(f: &VmFixture, k: usize, result: RetValue) {
    let case = &f.cases[k];
    let RetValue::Object(o) = result else { panic!("{}: main returned {result:?}", f.dir.display()) };
    let mut got = vec![];
    assert_eq!(flatten(&o, &mut got), case.structure, "{} case {k}", f.dir.display());
    assert_eq!(got.len(), case.outputs.len());
    for (j, (g, want)) in got.iter().zip(&case.outputs).enumerate() {
        assert_eq!(g.dtype(), want.dtype, "{} case {k} output {j}", f.dir.display());
        assert_eq!(g.shape(), &want.shape[..], "{} case {k} output {j}", f.dir.display());
        assert!(g.to_vec() == want.data, "{} case {k} output {j}: differs from upstream's", f.dir.display());
    }
}

#[test]
fn every_version_matches_its_own_runtime() {
    for f in fixtures() {
        let exe = load(&f.dir);
        let vm = make_vm(&exe);
        for (k, case) in f.cases.iter().enumerate() {
            let r = run_main(&vm, &case.inputs).unwrap_or_else(|e| panic!("{} case {k}: {e}", f.dir.display()));
            check(&f, k, r);
        }
    }
}
