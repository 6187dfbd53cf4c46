// The MPI process group: CPU tensors over the MPI library the launcher brought (Debian's OpenMPI).
// Every MPI call after MPI_Init runs on one communication thread, in submission order, so a
// bucket's all-reduce proceeds while the training thread goes on with backward
// (MPI_THREAD_SERIALIZED is enough: one thread at a time ever calls MPI).
#include <mpi.h>

#include <climits>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "framework/core/half.h"
#include "framework/dist/detail.h"

namespace demi::dist::detail {

namespace {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

void check_mpi(int code, const char* call, const std::string& what) {
  DEMI_CHECK(code == MPI_SUCCESS, call, " failed in ", what, ": ", mpi_error_string(code));
}

// Half types have no MPI datatype: each travels as an opaque 2-byte type, reduced by our own ops
// (fp32 arithmetic, one rounding, as NCCL does for half sums).
template <typename H, bool kMax>
void reduce_half(void* in, void* inout, int* length, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *length; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    // NaN wins a max, as in PyTorch (a NaN gradient on one rank must reach every rank).
    b[i] = H(kMax ? ((x > y || x != x) ? x : y) : x + y);
  }
}

// MPI_Init_thread once per process and MPI_Finalize when the last group is gone; the half
// datatypes and ops live as long.
class MpiEnvironment {
 public:
  static std::shared_ptr<MpiEnvironment> get() {
    static std::mutex mutex;
    static std::weak_ptr<MpiEnvironment> current;
    static bool finalized = false;
    std::lock_guard<std::mutex> lock(mutex);
    if (auto env = current.lock()) return env;
    DEMI_CHECK(!finalized, "init_process_group(\"mpi\"): MPI was already finalised in this process (the last "
               "process group was destroyed) and MPI cannot start twice; keep one process group for the run");
    auto env = std::shared_ptr<MpiEnvironment>(new MpiEnvironment(), [](MpiEnvironment* e) {
      delete e;
      finalized = true;
    });
    current = env;
    return env;
  }
  ~MpiEnvironment() {
    MPI_Op_free(&sum_f16);
    MPI_Op_free(&max_f16);
    MPI_Op_free(&sum_bf16);
    MPI_Op_free(&max_bf16);
    MPI_Type_free(&f16);
    MPI_Type_free(&bf16);
    if (we_initialized_) MPI_Finalize();
  }
  bool serialized_threads = false;  // whether a communication thread may make the MPI calls
  MPI_Datatype f16 = MPI_DATATYPE_NULL, bf16 = MPI_DATATYPE_NULL;
  MPI_Op sum_f16 = MPI_OP_NULL, max_f16 = MPI_OP_NULL, sum_bf16 = MPI_OP_NULL, max_bf16 = MPI_OP_NULL;

 private:
  MpiEnvironment() {
    int initialized = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&initialized);
    if (!initialized) {
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread",
                "init_process_group(\"mpi\")");
      we_initialized_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    serialized_threads = provided >= MPI_THREAD_SERIALIZED;
    MPI_Type_contiguous(2, MPI_BYTE, &f16);
    MPI_Type_commit(&f16);
    MPI_Type_contiguous(2, MPI_BYTE, &bf16);
    MPI_Type_commit(&bf16);
    MPI_Op_create(&reduce_half<Half, false>, /*commute=*/1, &sum_f16);
    MPI_Op_create(&reduce_half<Half, true>, 1, &max_f16);
    MPI_Op_create(&reduce_half<BFloat16, false>, 1, &sum_bf16);
    MPI_Op_create(&reduce_half<BFloat16, true>, 1, &max_bf16);
  }
  bool we_initialized_ = false;
};

class MpiWork final : public Work {
 public:
  explicit MpiWork(std::shared_future<void> done) : done_(std::move(done)) {}
  void wait() override { done_.get(); }

 private:
  std::shared_future<void> done_;
};

class ProcessGroupMpi final : public ProcessGroup {
 public:
  ProcessGroupMpi() : env_(MpiEnvironment::get()) {
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup", "init_process_group(\"mpi\")");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);  // errors come back as codes, then as demi::Error
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // torchrun's variables without an MPI launcher: every process would be a world of its own.
    const LaunchInfo launch = launch_info();
    DEMI_CHECK(launch.world_size == size_, "init_process_group(\"mpi\"): the launcher (", launch.launcher,
               ") set a world of ", launch.world_size, " processes but MPI sees ", size_,
               "; start the job with mpiexec -n ", launch.world_size, " (MPI cannot join processes that torchrun started)");
    if (env_->serialized_threads) thread_ = std::thread([this] { serve(); });
  }
  ~ProcessGroupMpi() override {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
      }
      changed_.notify_all();
      thread_.join();
    }
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    check_tensor(t, "all_reduce");
    const std::pair<MPI_Datatype, MPI_Op> type_op = datatype_and_op(t.dtype(), op);
    const MPI_Datatype type = type_op.first;
    const MPI_Op mpi_op = type_op.second;
    void* data = t.data_ptr();
    const int count = static_cast<int>(t.numel());
    return submit([this, data, count, type, mpi_op] {
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, count, type, mpi_op, comm_), "MPI_Allreduce", "all_reduce");
    });
  }

  std::shared_ptr<Work> broadcast_async(const Tensor& t, int root) override {
    check_tensor(t, "broadcast");
    DEMI_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of this group of ", size_);
    const MPI_Datatype type = datatype_and_op(t.dtype(), ReduceOp::Sum).first;
    void* data = t.data_ptr();
    const int count = static_cast<int>(t.numel());
    return submit([this, data, count, type, root] {
      check_mpi(MPI_Bcast(data, count, type, root, comm_), "MPI_Bcast", "broadcast");
    });
  }

  void barrier() override {
    submit([this] { check_mpi(MPI_Barrier(comm_), "MPI_Barrier", "barrier"); })->wait();
  }

 private:
  void check_tensor(const Tensor& t, const char* op) const {
    DEMI_CHECK(t.defined(), op, ": the tensor is undefined");
    DEMI_CHECK(t.device().kind() == Device::Kind::CPU, op, ": the mpi process group takes CPU tensors, got one on ",
               t.device(), "; use init_process_group(\"nccl\") for CUDA tensors");
    DEMI_CHECK(t.numel() <= INT_MAX, op, ": ", t.numel(), " elements are more than one MPI call takes (", INT_MAX,
               "); split the tensor");
  }

  std::pair<MPI_Datatype, MPI_Op> datatype_and_op(DType dtype, ReduceOp op) const {
    const bool sum = op == ReduceOp::Sum;
    switch (dtype) {
      case DType::F32: return {MPI_FLOAT, sum ? MPI_SUM : MPI_MAX};
      case DType::F64: return {MPI_DOUBLE, sum ? MPI_SUM : MPI_MAX};
      case DType::I64: return {MPI_INT64_T, sum ? MPI_SUM : MPI_MAX};
      case DType::F16: return {env_->f16, sum ? env_->sum_f16 : env_->max_f16};
      case DType::BF16: return {env_->bf16, sum ? env_->sum_bf16 : env_->max_bf16};
      default: break;
    }
    DEMI_CHECK(false, "process group (mpi): dtype ", dtype, " is not supported; use float32, float16, bfloat16, "
               "float64 or int64");
    return {};
  }

  // Runs `call` on the communication thread (or here, when MPI allows only the main thread).
  std::shared_ptr<Work> submit(std::function<void()> call) {
    auto task = std::make_shared<std::packaged_task<void()>>(std::move(call));
    auto work = std::make_shared<MpiWork>(task->get_future().share());
    if (!thread_.joinable()) {
      (*task)();
      return work;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
    }
    changed_.notify_all();
    return work;
  }

  void serve() {
    for (;;) {
      std::shared_ptr<std::packaged_task<void()>> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop, with nothing left to run
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      (*task)();  // an exception is stored in the task's future, for wait()
    }
  }

  std::shared_ptr<MpiEnvironment> env_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<std::packaged_task<void()>>> queue_;
  bool stop_ = false;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_mpi_process_group() { return std::make_shared<ProcessGroupMpi>(); }

void mpi_abort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace demi::dist::detail
