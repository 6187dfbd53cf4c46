// The dist tests run as 2 MPI ranks (tests/CMakeLists.txt launches them through mpiexec). MPI
// starts once per process, so every test shares this one world group, created on first use.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "framework/dist/process_group.h"
#include "framework/tensor/factories.h"

namespace demi::test {

inline dist::ProcessGroup& world() {
  static std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group("mpi");
  return *group;
}

// Whether `flag` holds on every rank (each rank's test asserts the same answer).
inline bool on_all_ranks(bool flag) {
  const Tensor t = full({}, flag ? 0.0 : 1.0, DType::F32);
  world().all_reduce(t, dist::ReduceOp::Max);
  return t.item<float>() == 0.0f;
}

// Whether t's bytes equal rank 0's t's bytes, on every rank.
inline bool identical_to_rank0(const Tensor& t) {
  const Tensor theirs = t.clone();
  world().broadcast(theirs, 0);
  return on_all_ranks(std::memcmp(theirs.data_ptr(), t.data_ptr(), t.nbytes()) == 0);
}

}  // namespace demi::test
