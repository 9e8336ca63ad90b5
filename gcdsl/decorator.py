"""`@gcdsl.kernel`: desugar a kernel's source, then hand it to `cute.kernel`."""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
import traceback
import types
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from . import config, frontend
from .diagnostics import Diag, GcdslError, SourceLocation, caller_location
from .frontend.analysis import KernelAnalysis, ParamKind
from .frontend.dump import Rendered, render_kernel
from .frontend.rewrite import BIND_NAME, RUNTIME_NAME
from .lower import _dsl, param_budget, runtime
from .lower.descriptors import descriptor_verdict, pack_descriptor_list
from .lower.grid_constant import check_grid_constant_arg
from .lower.launch_context import LaunchContext, LoweredInVain, NeedsLowering, launching
from .lower.tensor_lists import lower_tensor_list
from .lower.tensor_maps import check_template_swizzle

# Options of `cute.kernel` itself, handed to it unchanged.
DSL_OPTIONS = ("preprocess", "attributes", "is_experimental")


class Kernel:
    """A kernel as `@gcdsl.kernel` made it. Call it where a `@cute.kernel` is called.

    `desugared_source` is the Python that runs: it is what the CuTe DSL reads,
    traces and compiles.
    """

    def __init__(self, func: Callable, *, check_bounds: Optional[bool] = None, binding: str = "function",
                 dsl_options: Optional[Dict[str, Any]] = None) -> None:
        self._binding = binding  # "function", "static" or "class": how attribute access binds it
        if check_bounds is None:
            check_bounds = config.get().check_bounds
        self.check_bounds = check_bounds
        source = frontend.capture(func)
        self._analysis: KernelAnalysis = frontend.analyze(source)
        self._dsl_options = dict(dsl_options or {})
        desugared = frontend.desugar(self._analysis, check_bounds=check_bounds, kernel_options=self._dsl_options)
        self._rendered: Rendered = render_kernel(desugared, func.__name__, source.filename, source.tree.lineno)
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__
        self._signature = inspect.signature(func)
        self._dumped = False
        # (argument, first byte, end) in the parameter buffer, as the last launch laid them
        # out: `gcdsl.ptx.summary(ptx, kernel.parameter_spans)` names what it lists
        self.parameter_spans: List[Tuple[str, int, int]] = []
        # Lists a runtime index has reached: lowered up front in later launches (tensor
        # lists to a table, descriptor lists to one packed blob), saving a second trace.
        # Before any launch, the analysis's guesses stand in for them (`speculative`);
        # a guess the trace refutes is not made again.
        self._learned: Set[str] = set()
        self._refuted: Set[str] = set()
        self._cute_kernel = self._materialize(func, desugared)
        _dsl.locate_kernel_at(self._cute_kernel, source.filename, source.tree.lineno)

    def _materialize(self, func: Callable, desugared: frontend.Desugared) -> Any:
        """Execute the desugared text in the kernel's own module globals.

        Module globals (not a copy) keep names defined after the kernel visible,
        as they are to the original. Closures and computed defaults come in
        through the binding function the front end wrapped around the `def`.
        """
        code = self._rendered.code()
        globals_ = func.__globals__
        globals_.setdefault(RUNTIME_NAME, runtime)
        namespace: Dict[str, Any] = {}
        exec(code, globals_, namespace)
        if BIND_NAME not in namespace:
            return namespace[func.__name__]
        closure = [cell.cell_contents for cell in (func.__closure__ or ())]
        params = self._signature.parameters
        defaults = [params[name].default for name in desugared.defaulted_params]
        options = [self._dsl_options] if self._dsl_options else []
        return namespace[BIND_NAME](*closure, *defaults, *options)

    @property
    def desugared_source(self) -> str:
        """The desugared text: exactly what the DSL reads and traces."""
        return self._rendered.text

    # -- calling -------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> "_Launcher":
        _warn_about_the_compile_target_once()
        with self._errors_at_user_lines():
            bound = self._signature.bind(*args, **kwargs)
            for name, param in self._analysis.of_kind(ParamKind.GRID_CONSTANT_TENSOR).items():
                if name in bound.arguments:
                    check_grid_constant_arg(bound.arguments[name], param=name, location=self._param_location(name))
            for pair in self._analysis.template_pairs:
                if pair.table in bound.arguments and pair.template in bound.arguments:
                    check_template_swizzle(bound.arguments[pair.template], bound.arguments[pair.table],
                                           template_param=pair.template, table_param=pair.table,
                                           location=self._analysis.source.location(pair.node))
            for name, param in self._analysis.params.items():
                if name in bound.arguments:
                    self._check_literal_indices(param, bound.arguments[name])
            verdicts = {name: descriptor_verdict(bound.arguments.get(name), param=name)
                        for name, param in self._analysis.indexed.items()
                        if param.kind is ParamKind.DESCRIPTOR_LIST}
            return _Launcher(self, bound, LaunchContext(self.__name__, verdicts), keywords=kwargs.keys())

    def _dsl_launcher(self, bound: inspect.BoundArguments, lowered: Dict[str, Any], keywords: Set[str]) -> Any:
        """The DSL's launcher for `bound`, with the lists in `lowered` replaced by their
        lowered form, and the arguments passed as the caller passed them (the DSL names
        kernels after their positional arguments)."""
        arguments = {**bound.arguments, **lowered}
        # Defaults are sized for the budget but not passed: the DSL names kernels after
        # the arguments it is given, as under `@cute.kernel`.
        with_defaults = inspect.BoundArguments(self._signature, dict(arguments))
        with_defaults.apply_defaults()
        self.parameter_spans = param_budget.check(
            with_defaults.arguments, kernel=self.__name__,
            location=self._analysis.source.location(self._analysis.source.tree))
        self._dump_once()
        self._rendered.register()
        args, kwargs = [], {}
        for name, param in self._signature.parameters.items():
            if name not in arguments:
                continue
            if param.kind is param.VAR_POSITIONAL:
                args.extend(arguments[name])
            elif param.kind is param.VAR_KEYWORD:
                kwargs.update(arguments[name])
            elif name in keywords or param.kind is param.KEYWORD_ONLY:
                kwargs[name] = arguments[name]
            else:
                args.append(arguments[name])
        return self._cute_kernel(*args, **kwargs)

    def _lower(self, name: str, value: Any, context: LaunchContext) -> Any:
        """List parameter `name` in the form a runtime index needs: a packed blob of
        descriptors, or a table of tensor fields. Raises what makes that impossible."""
        if self._analysis.params[name].kind is ParamKind.DESCRIPTOR_LIST:
            verdict = context.descriptor_verdict(name)
            if verdict is not None:
                raise verdict
            return pack_descriptor_list(value)
        return lower_tensor_list(value, param=name)

    def _learned_lowerings(self, bound: inspect.BoundArguments, context: LaunchContext) -> Dict[str, Any]:
        """The lists a runtime index reached in earlier launches, lowered up front where
        this launch's arguments allow it (a list that cannot be lowered stays as it is:
        if a runtime index reaches it, the trace says where)."""
        lowered = {}
        guessed = self._analysis.speculative - self._learned - self._refuted
        for name in (self._learned | guessed) & bound.arguments.keys():
            try:
                lowered[name] = self._lower(name, bound.arguments[name], context)
            except GcdslError:
                continue
        context.guessed = guessed & lowered.keys()
        return lowered

    # -- checks on the host ----------------------------------------------------------

    def _check_literal_indices(self, param: Any, value: Any) -> None:
        """`P[-5]` on a list of 3: a gcdsl error at its line, not a bare IndexError."""
        if not isinstance(value, (list, tuple)):
            return
        for node, index in param.literals:
            if not -len(value) <= index < len(value):
                raise GcdslError(
                    Diag.INDEX_OUT_OF_RANGE,
                    f"`{param.name}[{index}]` is out of range: `{param.name}` holds {len(value)} entries",
                    location=self._analysis.source.location(node),
                    param=param.name,
                    hint=f"use an index in [{-len(value)}, {len(value)})" if value else f"`{param.name}` is empty",
                )

    # -- errors at the user's lines ----------------------------------------------------

    def _param_location(self, name: str) -> SourceLocation:
        return self._analysis.source.location(self._analysis.params[name].node)

    def _location(self, filename: str, line: int, param: Optional[str] = None) -> SourceLocation:
        """The user's line; the column of `param`'s first rewritten subscript on it, if any
        (so the caret sits under `loads[k]`, not at the statement's start)."""
        lowered = self._analysis.params.get(param) if param else None
        if lowered is not None and filename == self._analysis.source.filename:
            nodes = [site.node for site in lowered.sites] + [node for node, _ in lowered.literals]
            cols = [n.col_offset for n in nodes if self._analysis.source.location(n).line == line]
            if cols:
                return SourceLocation(filename, line, min(cols))
        return SourceLocation(filename, line, _indent(filename, line))


    def _user_place_of(self, filename: str, line: int) -> Optional[Tuple[str, int]]:
        """Where a location the DSL records while tracing lies in the user's file: a line
        of the desugared text maps to the user's line; a line of gcdsl's own code (the
        runtime the text calls) to the user's line of the call being traced."""
        if filename == self._rendered.filename:
            mapped = self._rendered.user_line(line)
            return (self._analysis.source.filename, mapped) if mapped else None
        if filename.startswith(_PACKAGE_DIR):
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename != self._rendered.filename:
                frame = frame.f_back
            if frame is not None:
                return self._user_place_of(frame.f_code.co_filename, frame.f_lineno)
        return None

    def _user_place_in(self, tb: Any) -> Optional[Tuple[str, int]]:
        """The user's file and line of the innermost desugared frame in a traceback."""
        for frame in reversed(traceback.extract_tb(tb)):
            if frame.filename == self._rendered.filename:
                line = self._rendered.user_line(frame.lineno)
                if line is not None:
                    return self._analysis.source.filename, line
        return None

    @contextlib.contextmanager
    def _errors_at_user_lines(self) -> Iterator[None]:
        """Errors raised while the desugared kernel is read or traced name the user's line."""
        try:
            yield
        except (NeedsLowering, LoweredInVain):  # the launch's own signals, not errors
            raise
        except GcdslError as err:
            place = None if err.location is not None else self._user_place_in(err.__traceback__)
            located = err.at(self._location(*place, param=err.param)) if place else err
            if config.get().frontend_debug:
                if located is err:
                    raise
                raise located from err  # keep the chain through gcdsl and the DSL
            raise located.with_traceback(None) from None  # the user's frames, not gcdsl's
        except Exception as err:
            place = self._user_place_in(err.__traceback__)

            def user_place(filename: str, line: int) -> Optional[Tuple[str, int]]:
                if filename == self._rendered.filename:
                    mapped = self._rendered.user_line(line)
                    return (self._analysis.source.filename, mapped) if mapped else None
                return place if filename.startswith(_PACKAGE_DIR) else None

            if not _dsl.relocate_dsl_error(err, user_place) and place and hasattr(err, "add_note"):
                err.add_note(f"gcdsl: raised in kernel `{self.__name__}` at {place[0]}:{place[1]}")
            raise

    # -- the dump --------------------------------------------------------------------

    def _dump_once(self) -> None:
        if self._dumped:
            return
        self._dumped = True
        settings = config.get()
        if settings.dump:
            print(f"# ---- gcdsl: desugared {self._rendered.filename} ----", file=sys.stderr)
            print(self.desugared_source, file=sys.stderr)
        dump_dir = settings.dump_dir
        if dump_dir:
            os.makedirs(dump_dir, exist_ok=True)
            where = self._analysis.source
            name = f"{self.__name__}.{os.path.basename(where.filename)}.{where.tree.lineno}.py"
            with open(os.path.join(dump_dir, name), "w") as f:
                f.write(self.desugared_source)

    # -- what a function object offers -------------------------------------------------

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
    """What calling a kernel returns: the DSL's launcher, whose `launch` traces the kernel.

    A runtime index that reaches a list still in the DSL's form stops the trace
    (`NeedsLowering`); the half-built kernel is dropped and the launch traces again
    with that list lowered. A list lowered on the analysis's guess that no runtime
    index reached by the end of the trace (`LoweredInVain`) is traced again in the
    DSL's form.
    """

    def __init__(self, kernel: Kernel, bound: inspect.BoundArguments, context: LaunchContext,
                 keywords: Iterable[str] = ()) -> None:
        self._kernel, self._bound, self._context = kernel, bound, context
        self._keywords = set(keywords)
        with launching(context), kernel._errors_at_user_lines():
            self._lowered = kernel._learned_lowerings(bound, context)
            self._launcher = kernel._dsl_launcher(bound, self._lowered, self._keywords)

    def launch(self, *args: Any, **kwargs: Any) -> Any:
        while True:
            snapshot = _dsl.trace_snapshot()
            self._context.runtime_indexed.clear()
            try:
                with launching(self._context), self._kernel._errors_at_user_lines(), \
                        _dsl.locations_at(self._kernel._user_place_of):  # PTX .loc at the user's lines
                    launched = self._launcher.launch(*args, **kwargs)
                self._kernel._learned |= self._context.guessed  # every guess was right
                return launched
            except NeedsLowering as need:
                _dsl.abandon_trace(snapshot, self._launcher)
                with launching(self._context), self._kernel._errors_at_user_lines():
                    self._relaunch_lowering(need)
            except LoweredInVain as idle:
                _dsl.abandon_trace(snapshot, self._launcher)
                self._relaunch_unlowered(idle.params)

    def _relaunch_unlowered(self, names: Set[str]) -> None:
        """Lists lowered on a guess met no runtime index: the DSL's form again, for this
        launch and later ones."""
        kernel = self._kernel
        kernel._refuted |= names
        self._context.guessed -= names
        for name in names:
            del self._lowered[name]
        with launching(self._context), kernel._errors_at_user_lines():
            self._launcher = kernel._dsl_launcher(self._bound, self._lowered, self._keywords)

    def _relaunch_lowering(self, need: NeedsLowering) -> None:
        """A runtime index reached list `need.param` in the DSL's form: lower it, for this
        launch and (as a hint) later ones, and make the launcher to trace again."""
        kernel, name = self._kernel, need.param
        if name in self._lowered:
            raise TypeError(f"gcdsl internal error: `{name}` was lowered and still reached as a list")
        try:
            self._lowered[name] = kernel._lower(name, self._bound.arguments[name], self._context)
            self._launcher = kernel._dsl_launcher(self._bound, self._lowered, self._keywords)
        except GcdslError as err:
            site = kernel._user_place_in(need.__traceback__)
            raise err.at(kernel._location(*site, param=err.param)) if site and err.location is None else err from None
        kernel._learned.add(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._launcher, name)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _indent(filename: str, line: int) -> int:
    import linecache

    text = linecache.getline(filename, line)
    return len(text) - len(text.lstrip())


def kernel(func: Optional[Callable] = None, **options: Any) -> Any:
    """Decorator used where `@cute.kernel` was; see the package docstring.

    `check_bounds=True` adds a range check to every runtime index of a list
    parameter (a failed check prints the kernel, parameter and line, then traps);
    `GCDSL_CHECK_BOUNDS=1` turns it on for kernels that do not say. The options of
    `cute.kernel` itself (`preprocess`, `attributes`, `is_experimental`) are handed
    to it unchanged.
    """
    unknown = sorted(set(options) - {"check_bounds", *DSL_OPTIONS})
    if unknown:
        raise GcdslError(
            Diag.UNSUPPORTED_DECORATOR,
            f"@gcdsl.kernel got unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(f'`{o}`' for o in unknown)}",
            location=caller_location(),
            hint=f"@gcdsl.kernel takes `check_bounds` and what cute.kernel takes: {', '.join(DSL_OPTIONS)}",
        )
    check_bounds = options.pop("check_bounds", None)
    if func is None:
        return lambda f: _decorate(f, check_bounds, options)
    return _decorate(func, check_bounds, options)


def _decorate(func: Any, check_bounds: Optional[bool], dsl_options: Dict[str, Any]) -> Kernel:
    try:
        return _make_kernel(func, check_bounds, dsl_options)
    except GcdslError as err:
        if config.get().frontend_debug:
            raise
        raise err.with_traceback(None) from None  # the error names the user's line; its frames are gcdsl's


def _make_kernel(func: Any, check_bounds: Optional[bool], dsl_options: Dict[str, Any]) -> Kernel:
    binding = "function"
    if isinstance(func, (staticmethod, classmethod)):  # `@gcdsl.kernel` above `@staticmethod`
        binding = "static" if isinstance(func, staticmethod) else "class"
        func = func.__func__
    if not inspect.isfunction(inspect.unwrap(func)):
        raise GcdslError(
            Diag.NOT_A_FUNCTION,
            f"@gcdsl.kernel applies to a kernel's `def`, not to {_kind_of(func)}",
            location=caller_location(),
            hint="put @gcdsl.kernel directly above the kernel's `def` (for a kernel method, "
                 "above the method's `def`)",
        )
    return Kernel(func, check_bounds=check_bounds, binding=binding, dsl_options=dsl_options)


def _kind_of(obj: Any) -> str:
    if inspect.isclass(obj):
        return f"the class `{obj.__name__}`"
    return f"a {type(obj).__name__}"


_TARGET_CHECKED = False


def _warn_about_the_compile_target_once() -> None:
    """A compile for the wrong GPU fails only where it runs: say so at the first kernel call."""
    global _TARGET_CHECKED
    if _TARGET_CHECKED:
        return
    _TARGET_CHECKED = True
    problem = _dsl.compile_target_problem()
    if problem:
        import warnings

        warnings.warn(f"gcdsl: {problem}. Set CUTE_DSL_ARCH (sm_90a for Hopper) in the environment, or in "
                      "os.environ before the first `import cutlass`.", RuntimeWarning, stacklevel=3)
