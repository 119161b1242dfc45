"""Unit tests for the cell splitter (pure AST analysis, no quantum stack needed)."""

from __future__ import annotations

import ast
import copy
import json
import pickle
import textwrap

import pytest

from qonductor_jupyter.splitter import (
    QUANTUM_PRIMITIVES,
    CellSyntaxError,
    Step,
    StepKind,
    UnsupportedCellError,
    WorkflowGraph,
    quantum_functions,
    split_cell,
)

C, Q, H = StepKind.CLASSICAL, StepKind.QUANTUM, StepKind.HYBRID


def split(src: str) -> WorkflowGraph:
    return split_cell(textwrap.dedent(src))


def kinds(graph: WorkflowGraph) -> list[StepKind]:
    return [step.kind for step in graph.steps]


CLASSIC = """\
qc = QuantumCircuit(2)
qc.h(0)
counts = sample(qc, shots=100)
probs = {k: v / 100 for k, v in counts.items()}
"""


# ---- the classic pre / quantum / post cell ----------------------------------------------------


def test_classic_three_way_split():
    g = split_cell(CLASSIC)
    assert kinds(g) == [C, Q, C]
    pre, quantum, post = g.steps
    assert [s.id for s in g.steps] == [0, 1, 2]
    assert (pre.lineno, pre.end_lineno) == (1, 2)
    assert pre.source == "qc = QuantumCircuit(2)\nqc.h(0)"
    assert pre.reads == ("QuantumCircuit",)
    assert pre.writes == ("qc",)
    assert pre.producers == {"QuantumCircuit": None}
    assert quantum.source == "counts = sample(qc, shots=100)"
    assert (quantum.lineno, quantum.end_lineno) == (3, 3)
    assert quantum.reads == ("qc", "sample")
    assert quantum.writes == ("counts",)
    assert quantum.producers == {"qc": 0, "sample": None}
    assert quantum.quantum_calls == 1
    assert post.reads == ("counts",)
    # ``counts.items()`` is a method call, so counts is conservatively a (may-)write.
    assert post.writes == ("counts", "probs")
    assert post.producers == {"counts": 1}
    assert post.quantum_calls == 0
    assert g.edges == ((0, 1), (1, 2))
    assert g.inputs == ("QuantumCircuit",)
    assert g.outputs == {"qc": 0, "counts": 2, "probs": 2}
    assert g.has_quantum
    assert g.predecessors(2) == (1,)


def test_consecutive_classical_statements_form_one_step():
    g = split(
        """
        import numpy as np
        a = 1
        b = a + 1
        c = np.array([a, b])
        """
    )
    assert kinds(g) == [C]
    (step,) = g.steps
    assert step.reads == ()
    assert step.writes == ("a", "b", "c", "np")
    assert not g.has_quantum
    assert g.edges == ()


def test_classical_runs_are_split_only_by_quantum_steps():
    g = split(
        """
        a = 1
        b = 2
        r = sample(a)
        c = r
        d = c
        e = estimate(d)
        """
    )
    assert kinds(g) == [C, Q, C, Q]
    assert [(s.lineno, s.end_lineno) for s in g.steps] == [(2, 3), (4, 4), (5, 6), (7, 7)]


def test_two_independent_samples_and_common_post_processing():
    g = split(
        """
        c1 = sample(qc1)
        c2 = sample(qc2)
        total = merge(c1, c2)
        """
    )
    assert kinds(g) == [Q, Q, C]
    assert g.edges == ((0, 2), (1, 2))
    assert (0, 1) not in g.edges
    assert g.steps[2].producers == {"c1": 0, "c2": 1, "merge": None}
    assert g.inputs == ("merge", "qc1", "qc2")


def test_two_quantum_steps_on_one_line_split_at_semicolon():
    g = split_cell("a = sample(x); b = estimate(y)\n")
    assert kinds(g) == [Q, Q]
    assert [s.source for s in g.steps] == ["a = sample(x)", "b = estimate(y)"]
    assert [s.lineno for s in g.steps] == [1, 1]


# ---- hybrid detection -------------------------------------------------------------------------


def test_loop_around_estimate_is_hybrid():
    g = split(
        """
        p = x0
        for i in range(10):
            e = estimate(ansatz.assign_parameters(p), H)
            p = update(p, e)
        print(e)
        """
    )
    assert kinds(g) == [C, H, C]
    loop = g.steps[1]
    assert loop.quantum_calls == 1
    # ``ansatz.assign_parameters(p)`` is a method call: conservatively a mutation of ansatz.
    assert loop.writes == ("ansatz", "e", "i", "p")
    assert loop.producers["p"] == 0
    assert g.steps[2].producers == {"e": 1, "print": None}


def test_while_loop_test_counts_as_loop():
    g = split("while estimate(c, H) > tol:\n    c = improve(c)\n")
    assert kinds(g) == [H]


def test_comprehension_is_hybrid():
    g = split("results = [sample(c) for c in circuits]\n")
    assert kinds(g) == [H]
    assert g.steps[0].reads == ("circuits", "sample")
    assert g.steps[0].writes == ("results",)


def test_comprehension_first_iterable_and_mixed_calls():
    # A direct call plus a nested one: the nested one makes it hybrid.
    g = split("r = [f(x) for x in sample(qc)] + [estimate(c) for c in cs]\n")
    assert kinds(g) == [H]
    assert g.steps[0].quantum_calls == 2


def test_conditional_and_with_are_still_quantum():
    g = split(
        """
        if use_hw:
            r = sample(qc)
        with session() as s:
            e = estimate(qc, obs)
        """
    )
    assert kinds(g) == [Q, Q]


def test_quantum_function_def_is_classical_and_call_is_hybrid():
    g = split(
        """
        def cost(p):
            return estimate(ansatz.assign_parameters(p), H)[0]
        x0 = zeros(3)
        res = minimize(cost, x0)
        print(res)
        """
    )
    assert kinds(g) == [C, H, C]
    definition, call, _ = g.steps
    assert definition.source.startswith("def cost(p):")
    assert definition.quantum_calls == 0
    assert definition.writes == ("cost", "x0")
    # The call runs cost's body, so it needs cost's free globals too.
    assert call.reads == ("H", "ansatz", "cost", "estimate", "minimize", "x0")
    assert call.producers["cost"] == 0
    assert call.producers["H"] is None
    assert g.inputs == ("H", "ansatz", "minimize", "zeros")


def test_direct_call_of_quantum_function_is_hybrid():
    g = split(
        """
        def run(c):
            return sample(c)
        counts = run(qc)
        """
    )
    assert kinds(g) == [C, H]


def test_transitive_quantum_function():
    g = split(
        """
        def energy(p):
            return estimate(circuit(p), H)
        def cost(p):
            return energy(p) + penalty(p)
        best = optimise(cost)
        """
    )
    assert kinds(g) == [C, H]
    assert {"H", "circuit", "penalty", "energy"} <= set(g.steps[1].reads)
    assert quantum_functions(ast.parse(textwrap.dedent(g.steps[0].source))) == {"energy", "cost"}


def test_quantum_function_defined_after_its_caller_late_binding():
    g = split(
        """
        def outer():
            return inner()
        def inner():
            return sample(qc)
        x = outer()
        """
    )
    assert kinds(g) == [C, H]


def test_lambda_quantum_function():
    g = split(
        """
        cost = lambda p: estimate(ansatz, H, p)
        res = minimize(cost, x0)
        """
    )
    assert kinds(g) == [H, H]


def test_class_with_quantum_method_is_classical_definition():
    g = split(
        """
        class Runner:
            shots = 100
            def run(self, qc):
                return sample(qc, shots=self.shots)
        r = Runner()
        """
    )
    assert kinds(g) == [C, H]
    assert g.steps[0].writes == ("Runner",)


def test_plain_function_call_is_classical():
    g = split(
        """
        def double(x):
            return 2 * x
        y = double(3)
        """
    )
    assert kinds(g) == [C]


def test_method_named_sample_is_not_quantum():
    g = split(
        """
        rows = df.sample(5)
        x = rng.estimate()
        """
    )
    assert kinds(g) == [C]
    assert g.steps[0].quantum_calls == 0
    assert not g.has_quantum


def test_rebinding_sample_disables_it():
    g = split(
        """
        r1 = sample(qc)
        from random import sample
        r2 = sample(population, 3)
        """
    )
    assert kinds(g) == [Q, C]
    post = g.steps[1]
    assert post.writes == ("r2", "sample")
    assert post.reads == ("population",)


def test_rebound_primitive_is_an_ordinary_dependency():
    g = split(
        """
        def estimate(x):
            return 0
        e = estimate(1)
        z = sample(qc)
        w = estimate(z)
        """
    )
    assert kinds(g) == [C, Q, C]
    assert g.steps[2].producers == {"estimate": 0, "z": 1}
    assert (0, 2) in g.edges


def test_local_parameter_named_sample_is_not_quantum():
    g = split(
        """
        def apply(sample, x):
            return sample(x)
        y = apply(f, 2)
        """
    )
    assert kinds(g) == [C]


# ---- def-use ----------------------------------------------------------------------------------


def test_augassign_reads_its_target():
    g = split(
        """
        total = 0
        r = sample(qc)
        total += r
        """
    )
    last = g.steps[2]
    assert last.reads == ("r", "total")
    assert last.writes == ("total",)
    assert last.producers == {"r": 1, "total": 0}


def test_read_before_write_within_step():
    g = split("x = x + 1\ny = x\n")
    assert g.steps[0].reads == ("x",)
    assert g.inputs == ("x",)


def test_function_free_globals_are_reads_of_defining_step():
    g = split(
        """
        def scale(v):
            return v * factor + offset(v)
        """
    )
    assert g.steps[0].reads == ("factor", "offset")
    assert g.steps[0].writes == ("scale",)
    assert g.inputs == ("factor", "offset")


def test_function_params_locals_and_enclosing_names_are_not_reads():
    g = split(
        """
        def outer(a, *args, k=1, **kw):
            b = a + k
            def inner(c):
                return b + c + g
            return inner(len(args))
        """
    )
    assert g.steps[0].reads == ("g", "len")


def test_function_called_later_reads_global_assigned_between():
    g = split(
        """
        def post(counts):
            return counts * scale
        r = sample(qc)
        scale = 2
        y = post(r)
        """
    )
    assert kinds(g) == [C, Q, C]
    definition, _, call = g.steps
    # scale is not bound in the defining step, so it is (conservatively) read there ...
    assert "scale" in definition.reads
    # ... and the calling step reads post's free globals, here bound by itself.
    assert call.reads == ("post", "r")
    assert call.writes == ("scale", "y")


def test_calling_earlier_function_pulls_in_globals_from_earlier_step():
    g = split(
        """
        scale = 2
        def post(c):
            return c * scale
        r = sample(qc)
        y = post(r)
        """
    )
    definition, _, call = g.steps
    assert definition.reads == ()  # scale is bound before the def in the same step
    assert call.reads == ("post", "r", "scale")
    assert call.producers == {"post": 0, "r": 1, "scale": 0}
    assert g.inputs == ("qc",)


def test_defining_step_does_not_read_global_bound_after_def_in_same_step():
    g = split(
        """
        def f():
            return k
        k = 3
        """
    )
    assert g.steps[0].reads == ()


def test_lambda_and_comprehension_free_globals():
    g = split(
        """
        key = lambda item: item[idx]
        ys = [x * w for x in xs if x > lo]
        """
    )
    assert g.steps[0].reads == ("idx", "lo", "w", "xs")
    assert g.steps[0].writes == ("key", "ys")


def test_walrus_binds_at_top_level_including_in_comprehension():
    g = split(
        """
        if (n := len(data)) > 3:
            pass
        vals = [last := v for v in data]
        r = sample(n)
        """
    )
    assert g.steps[0].writes == ("last", "n", "vals")
    assert g.steps[0].reads == ("data", "len")
    assert g.steps[1].producers == {"n": 0, "sample": None}


def test_del_counts_as_write_and_read():
    g = split(
        """
        tmp = 1
        r = sample(qc)
        del tmp
        """
    )
    last = g.steps[2]
    assert last.writes == ("tmp",)
    assert last.reads == ("tmp",)  # del needs the name to exist
    assert last.producers == {"tmp": 0}
    assert g.outputs["tmp"] == 2


def test_del_of_outside_name_makes_it_an_input():
    g = split_cell("del scratch\n")
    assert g.steps[0].reads == ("scratch",)
    assert g.steps[0].writes == ("scratch",)
    assert g.inputs == ("scratch",)


def test_import_aliases():
    g = split(
        """
        import numpy as np
        import os.path
        import qiskit.circuit.library
        from scipy.optimize import minimize as mini, least_squares
        """
    )
    assert g.steps[0].writes == ("least_squares", "mini", "np", "os", "qiskit")
    assert g.steps[0].reads == ()


def test_global_declaration_in_function_is_a_top_level_write():
    g = split(
        """
        def bump():
            global counter
            counter += 1
        r = sample(qc)
        bump()
        """
    )
    definition, _, call = g.steps
    assert definition.writes == ("bump", "counter")
    assert definition.reads == ("counter",)
    assert call.writes == ("counter",)
    assert call.reads == ("bump", "counter")
    assert call.producers == {"bump": 0, "counter": 0}
    assert g.outputs["counter"] == 2


def test_class_definition_reads_bases_and_body_globals():
    g = split(
        """
        class Model(Base):
            scale = DEFAULT
            def predict(self, x):
                return x * self.scale + bias
        m = Model()
        """
    )
    (step,) = g.steps
    assert step.reads == ("Base", "DEFAULT", "bias")
    assert step.writes == ("Model", "m")


def test_loop_bound_names_are_only_maybe_bound():
    g = split(
        """
        for x in items:
            last = x
        print(last)
        """
    )
    assert g.steps[0].reads == ("items", "last", "print")
    assert g.steps[0].writes == ("last", "x")


def test_maybe_write_passes_earlier_value_through():
    # If no energy improves on best_e, step 1 must still hand best_p on to step 2.
    g = split(
        """
        best_e, best_p = float("inf"), None
        for p in grid:
            e = estimate(ansatz(p), H)
            if e < best_e:
                best_e, best_p = e, p
        print(best_p)
        """
    )
    assert kinds(g) == [C, H, C]
    loop = g.steps[1]
    assert loop.producers["best_p"] == 0
    assert loop.producers["best_e"] == 0
    assert "e" not in loop.reads and "p" not in loop.reads  # nothing earlier to pass on
    assert g.steps[2].producers == {"best_p": 1, "print": None}
    assert "best_p" not in g.inputs


def test_if_else_both_branches_bind():
    g = split(
        """
        if flag:
            y = 1
        else:
            y = 2
        z = y
        """
    )
    assert g.steps[0].reads == ("flag",)


def test_except_name_and_try():
    g = split(
        """
        try:
            import fast as impl
        except ImportError as exc:
            impl = None
        use(impl)
        """
    )
    assert g.steps[0].writes == ("exc", "impl")
    assert g.steps[0].reads == ("ImportError", "use")


def test_match_statement_captures():
    g = split(
        """
        match point:
            case Point(x=px, y=0):
                r = px
            case [first, *rest]:
                r = first
        """
    )
    assert g.steps[0].reads == ("Point", "point")
    assert g.steps[0].writes == ("first", "px", "r", "rest")


def test_attribute_and_subscript_targets_read_and_mutate_their_base():
    g = split("cfg.shots = 10\ntable[key] = 1\n")
    assert g.steps[0].reads == ("cfg", "key", "table")
    assert g.steps[0].writes == ("cfg", "table")  # mutated in place, so handed back


def test_get_ipython_is_an_ordinary_input():
    src = "get_ipython().run_line_magic('time', '')\nr = sample(qc)\n"
    g = split_cell(src)
    assert g.inputs == ("get_ipython", "qc")


# ---- edges, inputs, outputs -------------------------------------------------------------------


def test_output_and_anti_dependence_edges():
    g = split(
        """
        x = 1
        a = sample(x)
        x = 2
        b = sample(x)
        """
    )
    assert kinds(g) == [C, Q, C, Q]
    # 1 reads x, 2 rewrites it: anti edge (1, 2). 0 and 2 both write x: output edge (0, 2).
    assert {(0, 1), (1, 2), (0, 2), (2, 3)} <= set(g.edges)
    assert g.steps[3].producers == {"sample": None, "x": 2}
    assert g.outputs["x"] == 2
    assert list(g.edges) == sorted(set(g.edges))


def test_outputs_map_to_last_writer():
    g = split(
        """
        a = 1
        r = sample(a)
        a = r
        s = sample(a)
        """
    )
    assert g.outputs == {"a": 2, "r": 1, "s": 3}


def test_inputs_exclude_builtins_and_primitives():
    g = split(
        """
        for i in range(len(data)):
            print(i)
        r = sample(qc)
        e = estimate(qc, obs)
        """
    )
    assert g.inputs == ("data", "obs", "qc")
    assert not {"print", "range", "len"} & set(g.inputs)
    assert not QUANTUM_PRIMITIVES & set(g.inputs)
    assert g.steps[0].producers["print"] is None  # builtins come from outside the cell


# ---- empty cells and errors -------------------------------------------------------------------


@pytest.mark.parametrize("src", ["", "\n\n", "# just a comment\n   # another\n"])
def test_empty_or_comment_only_cell(src):
    g = split_cell(src)
    assert g.steps == () and g.edges == () and g.inputs == () and g.outputs == {}
    assert not g.has_quantum
    assert "no steps" in g.describe()


def test_syntax_error_location_and_pretty():
    with pytest.raises(CellSyntaxError) as info:
        split_cell("x = 1\ny = foo bar\n")
    err = info.value
    assert isinstance(err, SyntaxError)
    assert err.lineno == 2
    assert err.offset == 9  # points at "bar"
    assert err.text.rstrip("\n") == "y = foo bar"
    assert "\n" not in str(err)
    assert "line 2" in str(err)
    pretty = err.pretty().splitlines()
    assert pretty[-3].strip() == "y = foo bar"
    caret_line = pretty[-2]
    assert caret_line.strip().startswith("^")
    assert caret_line.index("^") == pretty[-3].index("bar")
    assert pretty[-1].startswith("SyntaxError: ")


def test_syntax_error_unclosed_bracket_and_pickling():
    with pytest.raises(CellSyntaxError) as info:
        split_cell("r = sample(\n")
    err = pickle.loads(pickle.dumps(info.value))
    assert isinstance(err, CellSyntaxError)
    assert err.lineno == 1
    assert "^" in err.pretty()


def test_star_import_is_rejected():
    with pytest.raises(UnsupportedCellError) as info:
        split_cell("x = 1\nfrom numpy import *\n")
    err = info.value
    assert isinstance(err, ValueError)
    assert "star imports cannot be split" in str(err)
    assert err.lineno == 2
    assert "line 2" in str(err)
    assert "from numpy import *" in err.pretty()
    assert pickle.loads(pickle.dumps(err)).lineno == 2


# ---- serialisation and description ------------------------------------------------------------


def test_to_dict_from_dict_round_trip():
    g = split_cell(CLASSIC + "del probs\nfor i in range(3):\n    estimate(qc)\n")
    d = g.to_dict()
    restored = WorkflowGraph.from_dict(json.loads(json.dumps(d)))
    assert restored == g
    assert restored.steps[1].kind is StepKind.QUANTUM
    assert isinstance(restored.steps[0].reads, tuple)
    assert Step.from_dict(g.steps[1].to_dict()) == g.steps[1]
    assert hash(restored.steps[0]) == hash(g.steps[0])


def test_describe_mentions_every_step_and_edge():
    g = split_cell(CLASSIC)
    text = g.describe()
    assert text == g.describe()  # deterministic
    for step in g.steps:
        assert f"step {step.id}: {step.kind.value}" in text
        assert f"lines {step.lineno}-{step.end_lineno}" in text
    for src, dst in g.edges:
        assert f"{src} -> {dst}" in text
    assert "counts = sample(qc, shots=100)" in text
    assert "inputs: QuantumCircuit" in text
    assert "qc (step 0)" in text
    assert "probs (step 2)" in text


# ---- source extraction ------------------------------------------------------------------------


def test_decorated_def_source_and_lines():
    g = split(
        """
        r = sample(qc)
        @cache
        def f(x):
            return x
        """
    )
    step = g.steps[1]
    assert step.lineno == 3
    assert step.source.startswith("@cache\ndef f(x):")
    assert "cache" in step.reads


def test_non_ascii_and_crlf_sources():
    g = split_cell('label = "héllo"; r = sample(qc)\r\nprint(r, "ü")\r\n')
    assert [s.source for s in g.steps] == ['label = "héllo"', "r = sample(qc)", 'print(r, "ü")']


def test_step_sources_execute_in_sequence():
    # Running each step's source in order reproduces running the whole cell.
    src = textwrap.dedent(
        """
        def sample(n):
            return list(range(n))
        xs = sample(3)
        total = 0
        for x in xs:
            total += x
        """
    )
    g = split_cell(src)
    ns: dict = {}
    for step in g.steps:
        exec(compile(step.source, "<step>", "exec"), ns)
    assert ns["total"] == 3


# ---- in-place mutation ------------------------------------------------------------------------


def test_method_call_in_later_step_mutates_and_is_handed_back():
    g = split(
        """
        qc = QuantumCircuit(1)
        c = sample(qc)
        qc.measure_all()
        results = []
        """
    )
    assert kinds(g) == [C, Q, C]
    last = g.steps[2]
    assert last.writes == ("qc", "results")
    assert last.reads == ("qc",)  # still needs the old object
    assert last.producers == {"qc": 0}
    assert g.outputs["qc"] == 2
    # Step 1 reads qc and step 2 changes it: step 2 must wait (anti dependence).
    assert (1, 2) in g.edges
    assert (0, 2) in g.edges


def test_append_in_later_step():
    g = split(
        """
        results = []
        x = sample(qc)
        results.append(x)
        """
    )
    last = g.steps[2]
    assert last.writes == ("results",)
    assert last.reads == ("results", "x")
    assert last.producers == {"results": 0, "x": 1}
    assert g.outputs["results"] == 2


def test_method_call_on_notebook_value_is_handed_back():
    g = split_cell("history.append(sample(qc))\n")
    assert g.steps[0].writes == ("history",)
    assert g.inputs == ("history", "qc")
    assert g.outputs == {"history": 0}


@pytest.mark.parametrize(
    "stmt",
    [
        "a[0] = 1",
        "a[i] += 1",
        "del a[k]",
        "a.x.y[0] = 2",
        "a.update(extra)",
        "a.inner.items[0].reset()",
        "for a[n] in range(3):\n    pass",
        "if flag:\n    a.clear()",
        "with ctx:\n    a.x = 1",
        "try:\n    a.pop()\nexcept KeyError:\n    pass",
        "while cond():\n    a[0] -= 1",
        "_ = [a.add(v) for v in vals]",
    ],
)
def test_mutations_in_later_step(stmt):
    g = split_cell("a = make()\nr = sample(a)\n" + stmt + "\n")
    last = g.steps[2]
    assert "a" in last.writes
    assert "a" in last.reads
    assert last.producers["a"] == 0
    assert g.outputs["a"] == 2
    assert (1, 2) in g.edges


def test_subscript_assignment():
    g = split(
        """
        a = [0, 0]
        r = sample(qc)
        a[0] = 1
        """
    )
    assert g.steps[2].writes == ("a",)
    assert g.steps[2].reads == ("a",)
    assert g.outputs["a"] == 2


def test_attribute_assignment():
    g = split(
        """
        obj = Config()
        r = sample(qc)
        obj.x = 2
        """
    )
    assert g.steps[2].writes == ("obj",)
    assert g.steps[2].producers == {"obj": 0}
    assert g.outputs["obj"] == 2


def test_imported_module_method_call_is_not_a_mutation():
    g = split(
        """
        import numpy as np
        r = sample(qc)
        z = np.zeros(3)
        np.random.seed(0)
        """
    )
    last = g.steps[2]
    assert last.writes == ("z",)
    assert last.reads == ("np",)
    assert g.outputs["np"] == 0


def test_argument_only_use_is_not_a_write():
    g = split(
        """
        qc = build()
        r = sample(qc)
        n = len(qc)
        show(qc, r)
        """
    )
    last = g.steps[2]
    assert last.writes == ("n",)
    assert g.outputs["qc"] == 0
    assert (1, 2) in g.edges  # only the flow edge for r
    assert g.steps[1].writes == ("r",)  # sample(qc) passes qc, does not mutate it


def test_builtin_receiver_is_not_a_mutation_unless_rebound():
    g = split_cell("keys = dict.fromkeys(names)\n")
    assert g.steps[0].writes == ("keys",)
    g = split(
        """
        list = []
        r = sample(qc)
        list.append(r)
        """
    )
    assert g.steps[2].writes == ("list",)


def test_call_on_call_result_mutates_only_the_inner_receiver():
    g = split_cell("make().append(1)\nd.setdefault(k, []).append(v)\n")
    assert g.steps[0].writes == ("d",)


def test_bare_annotation_of_attribute_is_not_a_mutation():
    g = split_cell("obj.x: int\n")
    assert g.steps[0].writes == ()
    assert g.steps[0].reads == ("int", "obj")


def test_cell_function_mutating_a_global_mutates_it_when_used():
    g = split(
        """
        log = []
        def record(v):
            log.append(v)
            local = []
            local.append(v)
        r = sample(qc)
        record(r)
        """
    )
    definition, _, call = g.steps
    assert definition.writes == ("log", "record")  # defining does not add a mutation
    assert call.writes == ("log",)
    assert call.producers == {"log": 0, "r": 1, "record": 0}
    assert g.outputs["log"] == 2


def test_function_parameter_receiver_is_not_a_global_mutation():
    g = split(
        """
        def fill(xs):
            xs.append(1)
        r = sample(qc)
        fill(data)
        """
    )
    assert g.steps[2].writes == ()  # argument-only: invisible to the static analysis


def test_mutation_only_step_runs_after_readers():
    g = split(
        """
        r1 = sample(qc)
        qc.barrier()
        r2 = sample(qc)
        """
    )
    assert kinds(g) == [Q, C, Q]
    assert g.steps[1].writes == ("qc",)
    assert g.steps[2].producers == {"qc": 1, "sample": None}
    assert {(0, 1), (1, 2)} <= set(g.edges)
    assert g.inputs == ("qc",)
    assert g.outputs == {"qc": 1, "r1": 0, "r2": 2}


def test_mutation_steps_execute_in_sequence():
    src = textwrap.dedent(
        """
        def sample(v):
            return v * 2
        results = []
        x = sample(3)
        results.append(x)
        cfg = {}
        cfg["k"] = x
        """
    )
    g = split_cell(src)
    # Simulate the orchestrator: each step gets copies of its reads from their producers (as if
    # sent to another process) and hands back its writes; the notebook takes ``outputs``.
    results: dict[int, dict] = {}
    for step in g.steps:
        ns = {
            name: copy.deepcopy(results[producer][name])
            for name, producer in step.producers.items()
            if producer is not None
        }
        exec(compile(step.source, "<step>", "exec"), ns)
        results[step.id] = {name: ns[name] for name in step.writes if name in ns}
    final = {name: results[step_id][name] for name, step_id in g.outputs.items()}
    assert final["results"] == [6]
    assert final["cfg"] == {"k": 6}


def test_a_primitive_handed_on_as_a_value_makes_a_hybrid_step():
    # VQE(...).run(sample): the callee calls sample any number of times.
    graph = split_cell("vqe = make()\nresult = vqe.run(sample)\nenergy = result.energy\n")
    kinds = [s.kind.value for s in graph.steps]
    assert kinds == ["classical", "hybrid", "classical"]
    assert graph.has_quantum
    # The same through a function defined in the cell.
    graph = split_cell("def g():\n    return optimize(sample)\nr = g()\n")
    assert [s.kind.value for s in graph.steps][-1] == "hybrid"
