"""`@gcdsl.kernel`: desugar a kernel's source, then hand it to `cute.kernel`."""
from __future__ import annotations

import inspect
import linecache
import os
import sys
import traceback
import types
from typing import Any, Callable, Dict, Optional

from . import frontend
from .diagnostics import Diag, GcdslError, SourceLocation
from .frontend.analysis import KernelAnalysis, ParamKind
from .frontend.dump import register_source, render_with_line_map, synthetic_filename
from .frontend.rewrite import BIND_NAME, RUNTIME_NAME
from .lower import param_budget, runtime
from .lower.descriptors import check_descriptor_list
from .lower.grid_constant import check_grid_constant_arg
from .lower.tensor_lists import lower_tensor_list


class Kernel:
    """A kernel as `@gcdsl.kernel` made it. Call it where a `@cute.kernel` is called.

    `desugared_source` is the Python that runs: it is what the CuTe DSL reads,
    traces and compiles.
    """

    def __init__(self, func: Callable, *, check_bounds: Optional[bool] = None, binding: str = "function") -> None:
        self._binding = binding  # "function", "static" or "class": how attribute access binds it
        if check_bounds is None:
            check_bounds = os.environ.get("GCDSL_CHECK_BOUNDS", "0") not in ("", "0")
        self.check_bounds = check_bounds
        source = frontend.capture(func)
        self._analysis: KernelAnalysis = frontend.analyze(source)
        desugared = frontend.desugar(self._analysis, check_bounds=check_bounds)
        self.desugared_source, self._line_map = render_with_line_map(desugared)
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__
        self._signature = inspect.signature(func)
        self._filename = synthetic_filename(func.__name__, source.filename, source.tree.lineno)
        self._dumped = False
        self._cute_kernel = self._materialize(func, desugared)

    def _materialize(self, func: Callable, desugared: frontend.Desugared) -> Any:
        """Execute the desugared text in the kernel's own module globals.

        Module globals (not a copy) keep names defined after the kernel visible,
        as they are to the original. Closures and computed defaults come in
        through the binding function the front end wrapped around the `def`.
        """
        register_source(self._filename, self.desugared_source)
        code = compile(self.desugared_source, self._filename, "exec")
        globals_ = func.__globals__
        globals_.setdefault(RUNTIME_NAME, runtime)
        namespace: Dict[str, Any] = {}
        exec(code, globals_, namespace)
        if BIND_NAME not in namespace:
            return namespace[func.__name__]
        closure = [cell.cell_contents for cell in (func.__closure__ or ())]
        params = self._signature.parameters
        defaults = [params[name].default for name in desugared.defaulted_params]
        return namespace[BIND_NAME](*closure, *defaults)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self._signature.bind(*args, **kwargs)
        for name, param in self._analysis.of_kind(ParamKind.GRID_CONSTANT_TENSOR).items():
            if name in bound.arguments:
                check_grid_constant_arg(bound.arguments[name], param=name,
                                        location=self._analysis.source.location(param.node))
        for name, param in self._analysis.runtime_indexed.items():
            if name not in bound.arguments:
                continue
            location = self._analysis.source.location(param.node)
            if param.kind is ParamKind.DESCRIPTOR_LIST:
                check_descriptor_list(bound.arguments[name], param=name, location=location)
            elif param.kind is ParamKind.TENSOR_LIST:
                bound.arguments[name] = lower_tensor_list(bound.arguments[name], param=name, location=location)
        # Defaults are sized for the budget but not passed: the DSL names kernels after
        # the arguments it is given, as under `@cute.kernel`.
        with_defaults = inspect.BoundArguments(self._signature, bound.arguments.copy())
        with_defaults.apply_defaults()
        param_budget.check(with_defaults.arguments, kernel=self.__name__,
                           location=self._analysis.source.location(self._analysis.source.tree))
        self._dump_once()
        # linecache entries can be dropped by anyone; the DSL reads ours on every trace.
        register_source(self._filename, self.desugared_source)
        return _Launcher(self._cute_kernel(*bound.args, **bound.kwargs), self._locate)

    def _locate(self, err: GcdslError) -> GcdslError:
        """Point an error raised while tracing the desugared kernel at the user's line."""
        if err.location is not None:
            return err
        frames = traceback.extract_tb(err.__traceback__)
        for frame in reversed(frames):
            if frame.filename == self._filename and frame.lineno in self._line_map:
                line = self._line_map[frame.lineno]
                return err.at(SourceLocation(self._analysis.source.filename, line, _indent(self._analysis.source.filename, line)))
        return err

    def _dump_once(self) -> None:
        if self._dumped:
            return
        self._dumped = True
        if os.environ.get("GCDSL_DUMP", "0") not in ("", "0"):
            print(f"# ---- gcdsl: desugared {self._filename} ----", file=sys.stderr)
            print(self.desugared_source, file=sys.stderr)
        dump_dir = os.environ.get("GCDSL_DUMP_DIR")
        if dump_dir:
            os.makedirs(dump_dir, exist_ok=True)
            where = self._analysis.source
            name = f"{self.__name__}.{os.path.basename(where.filename)}.{where.tree.lineno}.py"
            with open(os.path.join(dump_dir, name), "w") as f:
                f.write(self.desugared_source)

    def __get__(self, instance: Any, owner: Optional[type] = None) -> Any:
        """Bind like the function `cute.kernel` returns: `self.kernel(...)` passes `self`."""
        if self._binding == "static":
            return self
        if self._binding == "class":
            return types.MethodType(self, owner if owner is not None else type(instance))
        return self if instance is None else types.MethodType(self, instance)

    def __getattr__(self, name: str) -> Any:
        # What `cute.kernel` returns has an API of its own (`set_name_prefix`, ...): pass it through.
        if name.startswith("__") or "_cute_kernel" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self._cute_kernel, name)

    def __repr__(self) -> str:
        return f"<gcdsl.kernel {self.__qualname__}>"


class _Launcher:
    """What calling a kernel returns: the DSL's launcher, whose `launch` traces the
    kernel; gcdsl errors raised while tracing get the user's line."""

    def __init__(self, launcher: Any, locate: Callable[[GcdslError], GcdslError]) -> None:
        self._launcher, self._locate = launcher, locate

    def launch(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._launcher.launch(*args, **kwargs)
        except GcdslError as err:
            located = self._locate(err)
            if os.environ.get("GCDSL_FRONTEND_DEBUG", "0") not in ("", "0"):
                raise located from err  # keep the chain through gcdsl and the DSL
            raise located from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._launcher, name)


def _indent(filename: str, line: int) -> int:
    text = linecache.getline(filename, line)
    return len(text) - len(text.lstrip())


def kernel(func: Optional[Callable] = None, *, check_bounds: Optional[bool] = None) -> Any:
    """Decorator used where `@cute.kernel` was; see the package docstring.

    `check_bounds=True` adds a device-side range check to every runtime index of a
    descriptor list (a failed check prints the kernel, parameter and line, then
    traps); `GCDSL_CHECK_BOUNDS=1` turns it on for kernels that do not say.
    """
    if func is None:
        return lambda f: kernel(f, check_bounds=check_bounds)
    if isinstance(func, (staticmethod, classmethod)):  # `@gcdsl.kernel` above `@staticmethod`
        binding = "static" if isinstance(func, staticmethod) else "class"
        return Kernel(func.__func__, check_bounds=check_bounds, binding=binding)
    if not callable(func):
        raise GcdslError(
            Diag.UNSUPPORTED_DECORATOR,
            f"@gcdsl.kernel was given {type(func).__name__}, not a function",
            hint="write `@gcdsl.kernel` or `@gcdsl.kernel(check_bounds=True)` above the kernel's `def`",
        )
    return Kernel(func, check_bounds=check_bounds)
