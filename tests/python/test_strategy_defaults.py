"""DistributedStrategy reads its defaults back from the C library (fleet_strategy_get on
fleet_strategy_default()), so Python and C cannot disagree: the async communicator's
max_merge_var_num / send_queue_size / send_wait_times read 0 ("not set": it adapts)."""
import ctypes

from fleet_c import _lib
from fleet_c._lib import lib
from fleet_c.distributed import fleet


def c_default(key):
    c = lib.fleet_strategy_default()
    buf = ctypes.create_string_buffer(1024)
    assert lib.fleet_strategy_get(ctypes.byref(c), _lib.cstr(key), buf, len(buf)) == 0, key
    return buf.value.decode()


def test_async_communicator_defaults_are_the_c_ones():
    s = fleet.DistributedStrategy()
    cfg = s.a_sync_configs
    for key in ("max_merge_var_num", "send_queue_size", "send_wait_times"):
        assert cfg[key] == int(c_default("a_sync_configs." + key)) == 0, key
    assert cfg["k_steps"] == int(c_default("a_sync_configs.k_steps"))


def test_every_field_read_back_matches_c():
    s = fleet.DistributedStrategy()
    for group in ("a_sync_configs", "localsgd_configs", "gradient_merge_configs", "amp_configs", "dgc_configs"):
        for key, value in getattr(s, group).items():
            text = c_default("%s.%s" % (group, key))
            if isinstance(value, bool):
                assert value == (text == "true"), key
            elif isinstance(value, (int, float)):
                assert value == float(text), key
            elif isinstance(value, list):
                assert ",".join(str(v) for v in value) == text, key
            else:
                assert value == text, key
    assert s.a_sync == (c_default("a_sync") == "true")


def test_set_values_still_read_back_and_unknown_fields_fail():
    s = fleet.DistributedStrategy()
    s.a_sync_configs = {"send_queue_size": 4}
    assert s.a_sync_configs["send_queue_size"] == 4 and s.a_sync_configs["max_merge_var_num"] == 0
    c = lib.fleet_strategy_default()
    buf = ctypes.create_string_buffer(8)
    assert lib.fleet_strategy_get(ctypes.byref(c), _lib.cstr("no_such_field"), buf, len(buf)) != 0
    assert b"no_such_field" in lib.fl_last_error()
    assert lib.fleet_strategy_get(ctypes.byref(c), _lib.cstr("amp_configs.dtype"), buf, 2) != 0  # too small
