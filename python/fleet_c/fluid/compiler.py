"""fluid.compiler: CompiledProgram and the strategies it takes (hints with no effect here)."""
from ..executor import BuildStrategy, CompiledProgram, ExecutionStrategy  # noqa: F401
