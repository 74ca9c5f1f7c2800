"""Lowering: graph passes, fusion, memory plan and code generation (trace -> Plan)."""


def compile_trace(trace):
    raise NotImplementedError("codegen not yet")
