//! Bad input that needs real artefacts: failing kernels, libraries without the expected symbols,
//! data symbols asked for as functions, executors shared between threads.

mod common;
use common::*;
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::module::Module;

#[test]
fn a_failing_kernel_fails_run_with_its_message_and_the_executor_stays_usable() {
    let f = Fixture::load("mlp_b1");
    let lib = f.load_lib();
    // Declare softmax's output as float64: the kernel's own argument check rejects it at run time.
    let json = f.graph_json();
    let mut g: serde_json::Value = serde_json::from_str(&json).unwrap();
    let dltypes = g["attrs"]["dltype"][1].as_array_mut().unwrap();
    let last = dltypes.len() - 1;
    dltypes[last] = "float64".into();
    let m = GraphExecutor::create(&g.to_string(), lib.clone(), DLDevice::CPU).unwrap();
    let ex = exec(&m);
    let factory = lib.node::<tvm_runtime::executor::factory::Factory>().unwrap();
    ex.bind_params(factory.params()).unwrap();
    f.set_inputs(&m);
    let e = ex.run().unwrap_err().to_c_message();
    assert!(e.starts_with("TVMError: operator tvmgen_default_fused_nn_softmax (node"), "{e}");
    assert!(e.contains("Assert fail") && e.contains("dtype"), "{e}");
    // Still usable: inputs, outputs and the earlier operators work; the same failure repeats cleanly.
    f.set_inputs(&m);
    assert_eq!(ex.output(0).unwrap().dtype().to_string(), "float64");
    assert!(ex.run().is_err());
}

#[test]
fn a_library_without_the_kernels_is_refused_with_the_missing_name() {
    let f = Fixture::load("mlp_b1");
    let libm = ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("libm");
    let lib = tvm_runtime::library::load_file(libm, "so").unwrap();
    assert_eq!(lib.type_key(), "library");
    let e = GraphExecutor::create(&f.graph_json(), lib, DLDevice::CPU).err().unwrap().to_c_message();
    assert!(e.contains("no such function in module: tvmgen_default_fused_nn_contrib_dense_pack_add_nn_relu"), "{e}");
}

/// A system-lib build linked into a shared object calls the runtime's C API by name. This test's
/// executable links the runtime statically and exports none of it: nothing resolves those names,
/// which is an error at load (RTLD_NOW), not a "symbol lookup error" that ends the process.
#[test]
fn a_library_calling_symbols_nobody_has_is_refused_at_load() {
    let Some(cc) = ["cc", "gcc"].into_iter().find(|c| std::process::Command::new(c).arg("--version").output().is_ok())
    else {
        eprintln!("no C compiler: skipped");
        return;
    };
    let dir = tvm_runtime_test_dir("syslib");
    let fx = common::fixtures_dir().join("mlp_syslib");
    let so = dir.join("lib.so");
    let status = std::process::Command::new(cc)
        .args(["-shared", "-o"])
        .arg(&so)
        .arg(fx.join("lib0.o"))
        .arg(fx.join("devc.o"))
        .status()
        .unwrap();
    assert!(status.success());
    let e = tvm_runtime::library::load_file(so.to_str().unwrap(), "so").err().unwrap().to_c_message();
    assert!(e.contains("undefined symbol: TVM"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tvm_runtime_test_dir(tag: &str) -> std::path::PathBuf {
    let dir = common::temp_path(&format!("errors-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_data_symbol_is_not_handed_out_as_a_function() {
    let lib = Fixture::load("mlp_b1").load_lib();
    let e = Module::get_function(&lib, "__tvm_dev_mblob", true).err().unwrap().to_c_message();
    assert!(e.contains("symbol '__tvm_dev_mblob'") && e.contains("is data, not a function"), "{e}");
    assert!(Module::get_function(&lib, "tvmgen_default_fused_nn_softmax", true).unwrap().is_some());
    assert!(Module::get_function(&lib, "no_such_symbol", true).unwrap().is_none());
}

#[test]
fn one_executor_used_from_two_threads_serialises() {
    let f = Fixture::load("convnet");
    let lib = f.load_lib();
    let m = f.executor_from_factory(&lib);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..50 {
                    f.set_inputs(&m);
                    exec(&m).run().unwrap();
                    f.check_outputs(&m, "two threads, one executor");
                }
            });
        }
    });
}

#[test]
fn malformed_module_blobs_are_refused() {
    use tvm_runtime::library::{blob, LibraryModule};
    let mut good = Vec::new();
    good.extend_from_slice(&1u64.to_le_bytes());
    good.extend_from_slice(&4u64.to_le_bytes());
    good.extend_from_slice(b"_lib");
    assert!(blob::load_tree(&good, LibraryModule::empty()).is_ok());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "truncated"),
        (u64::MAX.to_le_bytes().to_vec(), "exceeds"),
        (
            [&1u64.to_le_bytes()[..], &9u64.to_le_bytes(), b"mystery_k"].concat(),
            "mystery_k but a loader of that name is not registered",
        ),
        (
            [&2u64.to_le_bytes()[..], &4u64.to_le_bytes(), b"_lib", &4u64.to_le_bytes(), b"_lib"].concat(),
            "more than one _lib",
        ),
    ];
    for (bytes, want) in cases {
        let e = blob::load_tree(&bytes, LibraryModule::empty()).err().unwrap().to_c_message();
        assert!(e.contains(want), "expected '{want}' in '{e}'");
    }
}

/// Messages through the packed functions name the function once, then what was wrong.
#[test]
fn load_params_and_share_params_errors_read_once_through_the_c_path() {
    let f = Fixture::load("mlp_b1");
    let lib = f.load_lib();
    let m = f.executor_from_factory(&lib);
    let wrong = tvm_runtime::tensor::NDArray::empty(&[1, 64], "float32".parse().unwrap(), DLDevice::CPU).unwrap();
    let blob = tvm_runtime::params::save([("p1", &*wrong)]);
    let e = exec(&m).load_params(&blob).unwrap_err().to_c_message();
    // Reported in upstream's class, InternalError, with this library's message.
    assert_eq!(e, "InternalError: parameter 'p1' is float32 [1, 64] in the blob but float32 [1, 128] in the graph");
    let e = call(&m, "load_params", |a| {
        a.str("not a params blob");
    })
    .unwrap_err()
    .to_c_message();
    assert!(e.starts_with("InternalError: load_params: params: not a params blob"), "{e}");
    let e = call(&m, "share_params", |a| {
        a.object(lib.clone().into_any());
        a.str("x");
    })
    .unwrap_err()
    .to_c_message();
    assert_eq!(e, "InternalError: share_params: the module is a GraphExecutorFactory, not a GraphExecutor");
}

/// The sorting routines kernels call read one value per element: a vector type (which RPC or a
/// host can hand them) is refused, not read past the values it holds.
#[test]
fn sorting_a_vector_type_is_refused() {
    tvm_runtime::init();
    let sort = tvm_runtime::packed::registry::get("tvm.contrib.sort.sort").unwrap();
    let float32x2 = tvm_runtime::dlpack::DLDataType { code: 2, bits: 32, lanes: 2 };
    let data = tvm_runtime::tensor::NDArray::from_bytes(&[3], float32x2, &[0u8; 24]).unwrap();
    let out = tvm_runtime::tensor::NDArray::from_bytes(&[3], float32x2, &[0u8; 24]).unwrap();
    let mut a = tvm_runtime::packed::ArgsBuilder::new();
    a.object(data.into_any()).object(out.into_any()).int(0).int(1);
    let e = sort.call(&a.args()).unwrap_err().to_c_message();
    assert!(e.contains("sorting float32x2 is not supported (one lane)"), "{e}");
}

#[test]
fn archives_of_object_files_are_named_with_how_to_link_them() {
    // export_library("lib.tar") writes object files in a tar; a static library is an ar archive.
    let mut tar = vec![0u8; 1024];
    tar[..5].copy_from_slice(b"lib.o");
    tar[257..263].copy_from_slice(b"ustar\0");
    let tar_path = common::temp_path("objects.tar");
    std::fs::write(&tar_path, &tar).unwrap();
    let ar_path = common::temp_path("objects.a");
    std::fs::write(&ar_path, b"!<arch>\n/               0           0     0     0       4         `\n").unwrap();
    for (path, says) in [(&tar_path, "tar archive of object files"), (&ar_path, "static archive")] {
        let e = tvm_runtime::library::load_file(path.to_str().unwrap(), "so").err().unwrap().to_string();
        assert!(e.contains(says) && e.contains("cc -shared"), "{e}");
    }
}
