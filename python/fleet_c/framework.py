"""Programs, variables and Paddle's global default programs.

In the C library a main program owns its startup program (fl_prog_create makes the pair).
Paddle lets a user make the two separately and join them with program_guard; here a
Program is a main program once layers are built into it, and a startup program once it
is named as one (program_guard, minimize(startup_program=...), or the default pair).
A startup program may serve several main programs: running it runs each one's C startup
program in the order they were joined.

The global default programs live in this module, not in C: default_main_program() and
default_startup_program() return module-level objects that program_guard swaps.

Build errors are sticky in the C program: the first failing layer raises here, and the
program keeps the error (build a new one after fixing the model).
"""
import contextlib

from . import _lib
from ._lib import check, lib
from ._tensor import NAMES


class Program:
    """fluid.Program / paddle.static.Program."""

    def __init__(self):
        self._h = None          # fl_prog * of a main program (created on first use)
        self._owns = False      # free it with the object
        self._mains = []        # for a startup program: the main programs it initialises
        self._vars = {}         # fl_var * -> Variable, so one C variable has one Python object
        self._keep = []         # objects the C program refers to (optimizers, the fleet)
        self._seed = None

    @classmethod
    def _adopt(cls, handle):
        """Wraps a C main program this object will own (clone, loaded inference model)."""
        p = cls()
        p._h = _lib.check_ptr(handle)
        p._owns = True
        return p

    # -- handles ----------------------------------------------------------------------------
    def _main(self):
        """The C main program, created on first use."""
        if self._mains:
            raise ValueError("this Program is a startup program; layers are built into its main program "
                             "(default_main_program() or the first argument of program_guard)")
        if self._h is None:
            self._h = _lib.check_ptr(lib.fl_prog_create(), "fl_prog_create")
            self._owns = True
            if self._seed is not None:
                lib.fl_prog_set_seed(self._h, self._seed)
        return self._h

    def _is_startup(self):
        return bool(self._mains)

    def _join_startup(self, main):
        """Makes self the startup program of main (see the module docstring)."""
        if self is main:
            raise ValueError("a program cannot be its own startup program")
        if self._h is not None:
            raise ValueError("this Program already holds layers: it cannot be a startup program")
        if main not in self._mains:
            self._mains.append(main)
            self._keep.append(main)

    def _startup_handles(self):
        return [lib.fl_prog_startup(m._h) for m in self._mains if m._h is not None]

    def _check_built(self):
        if self._h is not None and lib.fl_prog_status(self._h) != 0:
            raise _lib.error_for(lib.fl_prog_status(self._h),
                                 "the program has a build error: " + _lib._text(lib.fl_prog_error(self._h)))

    def __del__(self):
        if self._owns and self._h and not _lib.shutting_down[0]:
            lib.fl_prog_free(self._h)
            self._h = None

    # -- variables --------------------------------------------------------------------------
    def _wrap(self, ptr):
        v = self._vars.get(ptr)
        if v is None:
            v = Variable(self, ptr)
            self._vars[ptr] = v
        return v

    def _layer_result(self, ptr, op):
        """The Variable of a layer's output, or the library's build error as an exception."""
        if ptr:
            return self._wrap(ptr)
        st = lib.fl_prog_status(self._h) if self._h else 0
        if st:
            raise _lib.error_for(st, _lib._text(lib.fl_prog_error(self._h)))
        raise _lib.err_from_last(op)

    def list_vars(self):
        if self._h is None:
            return []
        return [self._wrap(lib.fl_prog_var_at(self._h, i)) for i in range(lib.fl_prog_num_vars(self._h))]

    def all_parameters(self):
        return [v for v in self.list_vars() if v.is_parameter]

    def global_block(self):
        return Block(self)

    def block(self, index=0):
        if index != 0:
            raise IndexError("Fleet programs have one block")
        return Block(self)

    @property
    def num_blocks(self):
        return 1

    @property
    def random_seed(self):
        return 1 if self._seed is None else self._seed

    @random_seed.setter
    def random_seed(self, seed):
        self._seed = int(seed)
        if self._h is not None:
            lib.fl_prog_set_seed(self._h, self._seed)

    def clone(self, for_test=False):
        """A deep copy; for_test drops backward and optimizer ops and switches dropout and
        batch_norm to inference.  The copy has no startup program of its own: parameters
        are shared by name through the scope, so run the original's startup program."""
        if self._mains:
            raise ValueError("clone() of a startup program is not supported")
        c = Program._adopt(lib.fl_prog_clone(self._main(), 1 if for_test else 0))
        c._keep = list(self._keep)
        return c

    def num_ops(self):
        return 0 if self._h is None else lib.fl_prog_num_ops(self._h)

    def op_types(self):
        if self._h is None:
            return []
        return [_lib._text(lib.fl_prog_op_type(self._h, i)) for i in range(lib.fl_prog_num_ops(self._h))]

    def to_string(self, throw_on_error=False, with_details=False):
        if self._mains:
            return "\n".join(_prog_text(h) for h in self._startup_handles())
        if self._h is None:
            return ""
        return _prog_text(self._h)

    def __str__(self):
        return self.to_string()


def _prog_text(h):
    buf = _lib.c_void_p()
    n = _lib.c_size_t()
    check(lib.fl_prog_to_text(h, _lib.ctypes.byref(buf), _lib.ctypes.byref(n)))
    try:
        return _lib.ctypes.string_at(buf.value, n.value).decode("utf-8", "replace")
    finally:
        _lib.c_free(buf.value)


class Block:
    """The one block of a program (Paddle programs have nested blocks; Fleet's have one)."""

    def __init__(self, program):
        self.program = program

    def var(self, name):
        if self.program._h is not None:
            ptr = lib.fl_prog_var(self.program._h, _lib.cstr(name))
            if ptr:
                return self.program._wrap(ptr)
        raise ValueError("var %s not in this block" % name)

    def has_var(self, name):
        return self.program._h is not None and bool(lib.fl_prog_var(self.program._h, _lib.cstr(name)))

    @property
    def vars(self):
        return {v.name: v for v in self.program.list_vars()}

    def all_parameters(self):
        return self.program.all_parameters()


class Variable:
    """A variable of a program (fluid.framework.Variable).  Arithmetic operators build
    elementwise and scale ops, as Paddle's."""

    def __init__(self, program, ptr):
        self.program = program
        self._p = ptr

    @property
    def block(self):
        return Block(self.program)

    @property
    def name(self):
        return _lib._text(lib.fl_var_name(self._p))

    @property
    def shape(self):
        sp = lib.fl_var_shape(self._p)
        return tuple(sp[i] for i in range(lib.fl_var_ndim(self._p)))

    @property
    def dtype(self):
        return NAMES.get(lib.fl_var_dtype(self._p), "invalid")

    @property
    def lod_level(self):
        return lib.fl_var_lod_level(self._p)

    @property
    def persistable(self):
        return bool(lib.fl_var_persistable(self._p))

    @property
    def is_parameter(self):
        return bool(lib.fl_var_is_param(self._p))

    @property
    def stop_gradient(self):
        return bool(lib.fl_var_stop_gradient(self._p))

    @stop_gradient.setter
    def stop_gradient(self, stop):
        lib.fl_var_set_stop_gradient(self._p, 1 if stop else 0)

    def __repr__(self):
        return "Variable(name=%s, shape=%s, dtype=%s, lod_level=%d%s)" % (
            self.name, list(self.shape), self.dtype, self.lod_level, ", persistable" if self.persistable else "")

    __str__ = __repr__

    # -- operators ------------------------------------------------------------------------------
    def _binary(self, other, op, reverse=False):
        from . import layers
        if isinstance(other, Variable):
            x, y = (other, self) if reverse else (self, other)
            return getattr(layers, "elementwise_" + op)(x, y)
        c = float(other)
        if op == "add":
            return layers.scale(self, 1.0, c)
        if op == "sub":
            return layers.scale(self, -1.0, c) if reverse else layers.scale(self, 1.0, -c)
        if op == "mul":
            return layers.scale(self, c, 0.0)
        if op == "div" and not reverse:
            return layers.scale(self, 1.0 / c, 0.0)
        raise TypeError("dividing a number by a Variable is not supported")

    def __add__(self, o):
        return self._binary(o, "add")

    def __radd__(self, o):
        return self._binary(o, "add", True)

    def __sub__(self, o):
        return self._binary(o, "sub")

    def __rsub__(self, o):
        return self._binary(o, "sub", True)

    def __mul__(self, o):
        return self._binary(o, "mul")

    def __rmul__(self, o):
        return self._binary(o, "mul", True)

    def __truediv__(self, o):
        return self._binary(o, "div")

    def __rtruediv__(self, o):
        return self._binary(o, "div", True)

    def __neg__(self):
        from . import layers
        return layers.scale(self, -1.0, 0.0)

    def _compare(self, other, op):
        """x < y and the like: the comparison op (int32 0 / 1; a number becomes a [1] constant
        of x's dtype, broadcast)."""
        from . import layers
        if not isinstance(other, Variable):
            other = layers.fill_constant([1], self.dtype, float(other))
        return getattr(layers, op)(self, other)

    def __lt__(self, o):
        return self._compare(o, "less_than")

    def __le__(self, o):
        return self._compare(o, "less_equal")

    def __gt__(self, o):
        return self._compare(o, "greater_than")

    def __ge__(self, o):
        return self._compare(o, "greater_equal")

    __hash__ = object.__hash__


# ---- the global default programs --------------------------------------------------------------

_main_program = Program()
_startup_program = Program()
_startup_program._join_startup(_main_program)


def default_main_program():
    """The program layers are built into (Paddle's global default main program)."""
    return _main_program


def default_startup_program():
    """The program holding the initializers of the default main program's parameters."""
    return _startup_program


def switch_main_program(program):
    global _main_program
    prev, _main_program = _main_program, program
    return prev


def switch_startup_program(program):
    global _startup_program
    prev, _startup_program = _startup_program, program
    return prev


@contextlib.contextmanager
def program_guard(main_program, startup_program=None):
    """Builds into main_program, its initializers into startup_program (or the current
    default startup program when None, as Paddle)."""
    if not isinstance(main_program, Program):
        raise TypeError("program_guard: main_program must be a Program, got %s" % type(main_program).__name__)
    startup = startup_program if startup_program is not None else _startup_program
    if not isinstance(startup, Program):
        raise TypeError("program_guard: startup_program must be a Program, got %s" % type(startup).__name__)
    startup._join_startup(main_program)
    prev_main = switch_main_program(main_program)
    prev_startup = switch_startup_program(startup)
    try:
        yield
    finally:
        switch_main_program(prev_main)
        switch_startup_program(prev_startup)


def current_main():
    """The C handle of the current default main program (layers that take no input var)."""
    return _main_program, _main_program._main()
