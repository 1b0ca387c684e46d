// Where a plan's instructions came from (step.explain()): the tracer's source lines from the
// Python stack, and one record per instruction.
#include "common.h"
#include "flowgrad/plan/plan.h"

namespace fg::py_bind {

// "file.py:12" of the innermost Python frame whose file does not start with `skip`; "" when this
// thread does not hold the interpreter (a C++ layer released it: the tracer keeps the last line).
std::string user_line(const std::string& skip) {
  if (!PyGILState_Check()) return "";
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  std::string out;
  while (frame && out.empty()) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    if (!file) PyErr_Clear();
    std::string name = file ? file : "";
    if (name.compare(0, skip.size(), skip) != 0)
      out = name.substr(name.find_last_of("/\\") + 1) + ":" + std::to_string(PyFrame_GetLineNumber(frame));
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return out;
}

py::list explain(const plan::Plan& p) {
  py::list out;
  const auto& code = p.instructions();
  for (size_t i = 0; i < code.size(); ++i) {
    const plan::Instruction& ins = code[i];
    py::dict d;
    d["instruction"] = i;
    d["op"] = std::string(plan::op_name(ins));
    d["phase"] = plan::phase_name(ins.phase);
    const plan::Origin* origin = ins.origin >= 0 ? &p.origins()[ins.origin] : nullptr;
    d["module"] = origin ? origin->module : "";
    d["source"] = origin ? origin->source : "";
    d["run"] = ins.run;
    size_t bytes = 0;
    py::object offset = py::none();
    for (const plan::Value& v : ins.out) {
      const plan::Buffer& b = p.buffers()[v.buffer];
      if (b.kind != plan::BufferKind::Arena || b.local) continue;
      if (offset.is_none()) offset = py::int_(b.offset);
      bytes += b.bytes;
    }
    d["buffer"] = ins.out.empty() ? "" : p.buffers()[ins.out[0].buffer].name;
    d["bytes"] = bytes;
    d["offset"] = offset;
    out.append(d);
  }
  return out;
}

}  // namespace fg::py_bind
