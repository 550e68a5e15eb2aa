"""paddle.static.create_global_var's persistable flag, as Paddle: persistable=True is filled
by the startup program, kept in the scope and saved with the persistables; persistable=False
(Paddle's default) is not saved, and no value carries from one run to the next (Paddle makes
the main program's variable afresh in each run; here each run sets it to value)."""
import os

import numpy as np

import fleet_c as paddle
import fleet_c.fluid as fluid


def test_persistable_flag_decides_saving(tmp_path):
    paddle.enable_static()
    main, startup = fluid.Program(), fluid.Program()
    scope = fluid.Scope()
    with fluid.program_guard(main, startup), fluid.scope_guard(scope):
        kept = paddle.static.create_global_var([2], 3.0, "float32", persistable=True, name="kept")
        temp = paddle.static.create_global_var([2], 5.0, "float32", name="temp")
        double = fluid.layers.scale(temp, 2.0)
        assert kept.persistable and not temp.persistable
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        for _ in range(2):
            k, t, d = exe.run(main, fetch_list=[kept, temp, double])
            np.testing.assert_array_equal(k, [3.0, 3.0])
            np.testing.assert_array_equal(t, [5.0, 5.0])
            np.testing.assert_array_equal(d, [10.0, 10.0])
        fluid.io.save_persistables(exe, str(tmp_path / "saved"), main)
    from safetensors.numpy import load_file
    saved = load_file(os.path.join(str(tmp_path / "saved"), "persistables.safetensors"))
    assert "kept" in saved and "temp" not in saved, sorted(saved)
    with fluid.scope_guard(fluid.Scope()):  # what was saved is all a fresh scope needs
        exe = fluid.Executor(fluid.CPUPlace())
        fluid.io.load_persistables(exe, str(tmp_path / "saved"), main)
        k, t = exe.run(main, fetch_list=[kept, temp])
        np.testing.assert_array_equal(k, [3.0, 3.0])
        np.testing.assert_array_equal(t, [5.0, 5.0])
