// module.cpp - mobius._core: the Python binding over the host's C++ API (mobius/convert.hpp,
// mobius/info.hpp, mobius/hub.hpp). The public Python API (mobius/__init__.py) is written over
// these few calls.
//
// Long work (a hub download, a build, a save) runs on a worker thread with the GIL released; the
// calling thread waits, and checks for signals every 50 ms, so Ctrl-C raises KeyboardInterrupt:
// the work is cancelled where it polls (between weight chunks, in every transfer), the output
// folder is left as it was, and the worker is joined before the exception is raised.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "mobius/build.hpp"
#include "mobius/convert.hpp"
#include "mobius/error.hpp"
#include "mobius/hub.hpp"
#include "mobius/info.hpp"

namespace py = pybind11;

namespace {

// The exception classes, created at import (mobius.Error and its kinds).
struct Exceptions {
  PyObject* error = nullptr;
  PyObject* config = nullptr;
  PyObject* checkpoint = nullptr;
  PyObject* plugin = nullptr;
  PyObject* hub = nullptr;
} g_exc;

// Which class a mobius::Error becomes: the kind it carries, and the hub's errors by their tag.
PyObject* exception_class(const mobius::Error& e) {
  if (std::string(e.what()).rfind("[hub]", 0) == 0) return g_exc.hub;
  switch (e.kind()) {
    case mobius::ErrorKind::Config: return g_exc.config;
    case mobius::ErrorKind::Checkpoint: return g_exc.checkpoint;
    case mobius::ErrorKind::Plugin:
    case mobius::ErrorKind::Internal: return g_exc.plugin;
    default: return g_exc.error;
  }
}

// Python callables called from the worker thread, and what they raised.
class Callbacks {
 public:
  // progress: None/False (nothing), True (the bars on stderr) or a callable(stage, done, total).
  explicit Callbacks(py::object progress) {
    if (progress.is_none()) return;
    if (PyCallable_Check(progress.ptr())) {
      progress_ = std::move(progress);
    } else {
      bar_ = progress.cast<bool>();
    }
  }
  ~Callbacks() {
    py::gil_scoped_acquire gil;
    progress_ = py::object();
  }
  Callbacks(const Callbacks&) = delete;
  Callbacks& operator=(const Callbacks&) = delete;

  bool bar() const { return bar_; }
  bool cancelled() const { return cancelled_.load(); }
  void cancel() { cancelled_ = true; }
  std::function<bool()> cancel_poll() {
    return [this] { return cancelled_.load(); };
  }
  // nullptr unless a callable was given.
  std::function<void(const char*, uint64_t, uint64_t)> reporter() {
    if (!progress_) return {};
    return [this](const char* stage, uint64_t done, uint64_t total) {
      if (cancelled_) return;
      py::gil_scoped_acquire gil;
      try {
        progress_(stage, done, total);
      } catch (py::error_already_set& e) {
        keep(e);
      }
    };
  }
  // An exception raised by a callback or a signal handler: the work stops, and it is raised
  // once the work has.
  void keep(py::error_already_set& e) {
    std::lock_guard<std::mutex> l(mu_);
    if (!raised_) raised_ = std::move(e);
    cancelled_ = true;
  }
  void rethrow() {
    std::lock_guard<std::mutex> l(mu_);
    if (raised_) {
      py::error_already_set e = std::move(*raised_);
      raised_.reset();
      throw e;
    }
  }

 private:
  py::object progress_;
  bool bar_ = false;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::optional<py::error_already_set> raised_;
};

// Runs `fn` on a worker thread with the GIL released; see the top of the file. Call with the
// GIL held.
template <class F>
auto run_released(Callbacks& cb, F&& fn) -> decltype(fn()) {
  using T = decltype(fn());
  std::optional<T> result;
  std::exception_ptr error;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  {
    py::gil_scoped_release nogil;
    std::thread worker([&] {
      try {
        result.emplace(fn());
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> l(mu);
      done = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> l(mu);
    while (!done) {
      if (cv.wait_for(l, std::chrono::milliseconds(50), [&] { return done; })) break;
      l.unlock();
      {
        py::gil_scoped_acquire gil;
        // Signal handlers run here, in the main thread (elsewhere this is a no-op).
        if (!cb.cancelled() && PyErr_CheckSignals() != 0) {
          py::error_already_set e;
          cb.keep(e);
        }
      }
      l.lock();
    }
    l.unlock();
    worker.join();
  }
  cb.rethrow();  // KeyboardInterrupt, or what a progress callable raised
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

// A registry of loaded plugins. Builds read it while register() may change it: a lock.
struct Registry {
  std::shared_ptr<mobius::PluginSet> set;
  mutable std::shared_mutex mu;
};

std::optional<std::vector<std::filesystem::path>> dirs_of(const std::optional<std::vector<std::string>>& v) {
  if (!v) return std::nullopt;
  return std::vector<std::filesystem::path>(v->begin(), v->end());
}

py::dict registration_dict(const mobius::Registration& r) {
  py::dict d;
  d["model_type"] = r.model_type;
  d["task"] = r.task;
  d["tasks"] = r.tasks.empty() ? std::vector<std::string>{r.task} : r.tasks;
  d["plugin"] = r.alias_of.empty() ? r.plugin : r.target_plugin;
  d["version"] = r.version;
  d["vendor"] = r.vendor;
  d["source"] = r.alias_of.empty() ? r.plugin_path : r.target_path;
  d["alias_of"] = r.alias_of.empty() ? py::object(py::none()) : py::object(py::str(r.alias_of));
  d["declared_by"] = r.alias_of.empty() ? py::object(py::none())
                                        : py::object(py::str(r.plugin.empty() ? std::string("in-process") : r.plugin_path));
  d["default_runtime"] = r.default_runtime.empty() ? std::string("ort-genai") : r.default_runtime;
  d["graphs"] = r.graphs;
  return d;
}

py::list plugin_records(const mobius::PluginSet& set) {
  py::list out;
  for (const auto& r : set.records) {
    py::dict d;
    d["name"] = r.name;
    d["version"] = r.version;
    d["vendor"] = r.vendor;
    d["library"] = r.library.string();
    d["manifest"] = r.manifest.string();
    d["origin"] = r.origin;
    d["model_types"] = r.model_types;
    d["aliases"] = r.aliases;
    d["status"] = r.loaded ? "loaded" : r.deferred ? "deferred" : "error";
    d["error"] = r.error;
    out.append(d);
  }
  return out;
}

// A build.
struct Package {
  std::optional<mobius::ConvertedModel> model;
};

py::list parts_of(const Package& p) {
  py::list out;
  for (const auto& part : p.model->parts()) {
    const mobius::ModelPackage& g = *part.package;
    py::dict d;
    d["folder"] = part.folder;
    d["component"] = part.component;
    d["graph"] = part.graph;
    d["file"] = g.graph_file();
    d["model_type"] = g.model_type();
    d["runtime"] = g.runtime();
    d["description"] = g.describe_json();
    d["provenance"] = g.provenance_json();
    out.append(d);
  }
  return out;
}

int default_threads() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u)); }

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "mobius's native core; use the mobius package's functions instead.";
  g_exc.error = PyErr_NewExceptionWithDoc("mobius.Error", "A build, save, download or registry failure.",
                                          PyExc_Exception, nullptr);
  auto kind = [&](const char* name, const char* doc) {
    return PyErr_NewExceptionWithDoc(name, doc, g_exc.error, nullptr);
  };
  g_exc.config = kind("mobius.ConfigError", "A config file (config.json, ...) is wrong: the file, the key and why.");
  g_exc.checkpoint = kind("mobius.CheckpointError", "A weights file is wrong: the file, the tensor and why.");
  g_exc.plugin = kind("mobius.PluginError", "A plugin failed: the plugin and why (never the checkpoint's fault).");
  g_exc.hub = kind("mobius.HubError", "The Hugging Face Hub (or its cache) failed: the file and why.");
  m.attr("Error") = py::handle(g_exc.error);
  m.attr("ConfigError") = py::handle(g_exc.config);
  m.attr("CheckpointError") = py::handle(g_exc.checkpoint);
  m.attr("PluginError") = py::handle(g_exc.plugin);
  m.attr("HubError") = py::handle(g_exc.hub);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const mobius::Error& e) {
      PyErr_SetString(exception_class(e), e.what());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory");
    } catch (const py::error_already_set&) {
      throw;
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const std::exception& e) {
      PyErr_SetString(g_exc.error, e.what());
    }
  });

  m.attr("version") = MOBIUS_VERSION;
  m.def("runtimes", &mobius::runtimes);
  m.def("default_threads", &default_threads);

  py::class_<Registry, std::shared_ptr<Registry>>(m, "Registry")
      .def(py::init([](const std::vector<std::string>& plugin_paths,
                       const std::optional<std::vector<std::string>>& default_dirs) {
             auto r = std::make_shared<Registry>();
             py::gil_scoped_release nogil;
             r->set = mobius::load_plugins(mobius::plugin_search_path(plugin_paths, dirs_of(default_dirs)));
             return r;
           }),
           py::arg("plugin_paths"), py::arg("default_dirs"))
      .def("contains",
           [](const Registry& r, const std::string& t) {
             std::shared_lock<std::shared_mutex> l(r.mu);
             return r.set->registry.contains(t);
           })
      .def("size",
           [](const Registry& r) {
             std::shared_lock<std::shared_mutex> l(r.mu);
             return r.set->registry.size();
           })
      .def("architectures",
           [](const Registry& r) {
             std::shared_lock<std::shared_mutex> l(r.mu);
             return r.set->registry.architectures();
           })
      .def("get",
           [](const Registry& r, const std::string& t) {
             std::shared_lock<std::shared_mutex> l(r.mu);
             return registration_dict(r.set->registry.get(t));
           })
      .def("register_alias",
           [](Registry& r, const std::string& new_type, const std::string& existing) {
             std::unique_lock<std::shared_mutex> l(r.mu);
             r.set->registry.register_alias(new_type, existing);
             return registration_dict(r.set->registry.get(new_type));
           })
      .def("plugins", [](const Registry& r) { return plugin_records(*r.set); })
      .def("failures", [](const Registry& r) { return r.set->failures(); })
      .def("searched", [](const Registry& r) {
        std::vector<std::string> out;
        for (const auto& d : r.set->searched) out.push_back(d.path.string());
        return out;
      });

  py::class_<Package, std::shared_ptr<Package>>(m, "Package")
      .def("parts", &parts_of)
      .def("runtime", [](const Package& p) { return p.model->runtime(); })
      .def("copied", [](const Package& p) { return p.model->copied(); })
      .def("skipped",
           [](const Package& p) {
             std::vector<std::pair<std::string, std::string>> out;
             for (const auto& s : p.model->skipped()) out.emplace_back(s.component, s.reason);
             return out;
           })
      .def("source",
           [](const Package& p) {
             const mobius::ModelSource& s = p.model->source();
             py::dict d;
             d["path"] = s.dir.string();
             d["repo"] = s.repo_id.empty() ? py::object(py::none()) : py::object(py::str(s.repo_id));
             d["revision"] = s.revision.empty() ? py::object(py::none()) : py::object(py::str(s.revision));
             d["commit"] = s.commit.empty() ? py::object(py::none()) : py::object(py::str(s.commit));
             return d;
           })
      .def(
          "save",
          [](const Package& p, const std::string& out, int threads, py::object progress) {
            Callbacks cb(std::move(progress));
            mobius::SaveOptions so;
            so.progress = cb.bar();
            so.on_progress = cb.reporter();
            so.threads = threads;
            so.cancelled = cb.cancel_poll();
            run_released(cb, [&] {
              p.model->save(out, so);
              return 0;
            });
          },
          py::arg("out"), py::arg("threads"), py::arg("progress"));

  m.def(
      "convert",
      [](const std::string& model, const py::dict& o, std::shared_ptr<Registry> registry,
         const std::vector<std::string>& plugin_paths, const std::optional<std::vector<std::string>>& default_dirs,
         py::object progress, py::list warnings) {
        mobius::ConvertOptions co;
        mobius::BuildOptions& b = co.build;
        b.dtype = o["dtype"].cast<std::string>();
        b.ep = o["ep"].cast<std::string>();
        b.ops = o["ops"].cast<std::string>();
        b.runtime = o["runtime"].cast<std::string>();
        b.task = o["task"].cast<std::string>();
        b.positions = o["position_ids"].cast<std::string>();
        b.block_size = o["block_size"].cast<int>();
        b.symmetric = o["symmetric"].cast<bool>();
        b.accuracy_level = o["accuracy_level"].cast<int>();
        b.expert_loop = o["expert_loop"].cast<bool>();
        b.no_weights = !o["load_weights"].cast<bool>();
        b.quiet = o["quiet"].cast<bool>();
        co.revision = o["revision"].cast<std::string>();
        co.components = o["components"].cast<std::vector<std::string>>();
        co.plugin_paths = plugin_paths;
        co.default_plugin_dirs = dirs_of(default_dirs);
        Callbacks cb(std::move(progress));
        co.download_progress = cb.bar();
        co.on_progress = cb.reporter();
        co.cancelled = cb.cancel_poll();
        auto pkg = std::make_shared<Package>();
        // What the build warned about, appended to `warnings` whether it succeeds or not.
        std::vector<std::string> warned;
        co.warn = [&warned](const std::string& w) { warned.push_back(w); };
        try {
          run_released(cb, [&] {
            std::shared_lock<std::shared_mutex> l;
            if (registry) l = std::shared_lock<std::shared_mutex>(registry->mu);
            pkg->model.emplace(mobius::convert(model, co, registry ? registry->set : nullptr));
            return 0;
          });
        } catch (...) {
          for (const auto& w : warned) warnings.append(w);
          throw;
        }
        for (const auto& w : warned) warnings.append(w);
        return pkg;
      },
      py::arg("model"), py::arg("options"), py::arg("registry"), py::arg("plugin_paths"),
      py::arg("default_dirs"), py::arg("progress"), py::arg("warnings"));

  m.def("info", [](const std::string& dir) {
    py::gil_scoped_release nogil;
    return mobius::describe_folder_json(dir);
  });

  m.def(
      "download",
      [](const std::string& spec, const std::string& revision, bool quiet, py::object progress) {
        Callbacks cb(std::move(progress));
        mobius::HubOptions ho;
        ho.revision = revision;
        ho.quiet = quiet;
        ho.progress = cb.bar();
        ho.on_progress = cb.reporter();
        ho.cancelled = cb.cancel_poll();
        return run_released(cb, [&] { return mobius::fetch_from_hub(spec, ho).dir.string(); });
      },
      py::arg("spec"), py::arg("revision"), py::arg("quiet"), py::arg("progress"));
}
