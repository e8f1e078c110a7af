// Engine: composes the rooms (engine/memcontrol.h, group_tree.h, flusher.h,
// options.h) behind the public API; no logic of its own.
#include "engine/engine.h"

#include <utility>

#include "absl/strings/str_cat.h"

#include "engine/flusher.h"
#include "engine/memcontrol.h"

namespace cgacct {

// The engine's state: the memory controller, then the flusher (declared
// last, so its thread stops before the controller goes away).
class EngineImpl {
 public:
  EngineImpl(int nr_cpus, const EngineOptions& options)
      : memcg(nr_cpus, options),
        flusher(options.periodic_flush_interval, memcg.clock(),
                [this] { memcg.FlushAll(); }) {}

  MemoryController memcg;
  PeriodicFlusher flusher;
};

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const EngineOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return std::unique_ptr<Engine>(new Engine(
      std::make_unique<EngineImpl>(options.ResolvedNrCpus(), options)));
}

Engine::Engine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::StatusOr<GroupInfo> Engine::CreateGroup(absl::string_view path,
                                              const LimitsUpdate& limits) {
  return impl_->memcg.CreateGroup(path, limits);
}
absl::StatusOr<uint64_t> Engine::DeleteGroup(absl::string_view path) {
  return impl_->memcg.DeleteGroup(path);
}
absl::StatusOr<std::vector<std::string>> Engine::ListGroups(
    absl::string_view path, bool recursive) const {
  return impl_->memcg.tree().ListGroups(path, recursive);
}
absl::StatusOr<GroupPage> Engine::ListGroupsPage(
    absl::string_view path, const GroupListing& listing) const {
  return impl_->memcg.tree().ListGroupsPage(path, listing);
}
absl::StatusOr<GroupInfo> Engine::SetLimits(absl::string_view path,
                                            const LimitsUpdate& limits) {
  return impl_->memcg.SetLimits(path, limits);
}
absl::StatusOr<ChargeResult> Engine::Charge(absl::string_view path,
                                            uint64_t nr_pages, PageKind kind,
                                            std::optional<int> cpu) {
  return impl_->memcg.Charge(path, nr_pages, kind, cpu);
}
absl::StatusOr<UnchargeResult> Engine::Uncharge(absl::string_view path,
                                                uint64_t nr_pages,
                                                PageKind kind,
                                                std::optional<int> cpu) {
  return impl_->memcg.Uncharge(path, nr_pages, kind, cpu);
}
absl::StatusOr<GroupHandle> Engine::ResolveGroup(absl::string_view path) const {
  return impl_->memcg.tree().Resolve(path);
}
std::vector<uint64_t> Engine::DyingGroupIds() const {
  return impl_->memcg.tree().DyingGroupIds();
}
absl::StatusOr<ChargeResult> Engine::Charge(GroupHandle group,
                                            uint64_t nr_pages, PageKind kind,
                                            std::optional<int> cpu) {
  return impl_->memcg.Charge(group, nr_pages, kind, cpu);
}
absl::StatusOr<ChargeResult> Engine::ChargeWithBatch(
    GroupHandle group, uint64_t nr_pages, uint64_t batch_pages, PageKind kind,
    std::optional<int> cpu) {
  if (batch_pages < nr_pages)
    return absl::InvalidArgumentError(
        absl::StrCat("batch_pages ", batch_pages, " is below nr_pages ",
                     nr_pages));
  return impl_->memcg.Charge(group, nr_pages, kind, cpu, batch_pages);
}
absl::StatusOr<UnchargeResult> Engine::Uncharge(GroupHandle group,
                                                uint64_t nr_pages,
                                                PageKind kind,
                                                std::optional<int> cpu) {
  return impl_->memcg.Uncharge(group, nr_pages, kind, cpu);
}
absl::StatusOr<uint64_t> Engine::Reclaim(absl::string_view path,
                                         uint64_t nr_pages) {
  return impl_->memcg.Reclaim(path, nr_pages);
}
absl::StatusOr<GroupStats> Engine::GetStats(absl::string_view path,
                                            FlushMode mode) {
  return impl_->memcg.GetStats(path, mode);
}
absl::StatusOr<uint64_t> Engine::OpenPeakWatermark(absl::string_view path) {
  return impl_->memcg.PeakFile(path, MemoryController::PeakOp::kOpen);
}
absl::StatusOr<uint64_t> Engine::ResetPeakWatermark(absl::string_view path,
                                                    uint64_t watermark_id) {
  return impl_->memcg.PeakFile(path, MemoryController::PeakOp::kReset,
                               watermark_id);
}
absl::StatusOr<uint64_t> Engine::ReadPeakWatermark(
    absl::string_view path, uint64_t watermark_id) const {
  return impl_->memcg.PeakFile(path, MemoryController::PeakOp::kRead,
                               watermark_id);
}
absl::Status Engine::ClosePeakWatermark(absl::string_view path,
                                        uint64_t watermark_id) {
  return impl_->memcg
      .PeakFile(path, MemoryController::PeakOp::kClose, watermark_id)
      .status();
}
absl::Status Engine::SetOomGroup(absl::string_view path, bool on) {
  return impl_->memcg.SetOomGroup(path, on);
}
absl::StatusOr<GroupEvents> Engine::GetEvents(GroupHandle group) const {
  return impl_->memcg.GetEvents(group);
}
absl::StatusOr<UnchargeResult> Engine::UnchargeAtMost(
    GroupHandle group, absl::string_view charged_path, uint64_t nr_pages,
    PageKind kind) {
  return impl_->memcg.UnchargeAtMost(group, charged_path, nr_pages, kind);
}
void Engine::DrainAllStock() { impl_->memcg.DrainAllStock(); }

absl::Status Engine::DrainStock(GroupHandle group,
                               absl::string_view charged_path) {
  return impl_->memcg.DrainStock(group, charged_path);
}
void Engine::SetRemoteStockDrainer(RemoteStockDrainer* drainer) {
  impl_->memcg.SetRemoteStockDrainer(drainer);
}
bool Engine::MaybePeriodicFlush() { return impl_->flusher.MaybeFlush(); }
EngineInfo Engine::GetInfo() const {
  EngineInfo info = impl_->memcg.GetInfo();
  info.periodic_flush_interval = impl_->flusher.interval();
  return info;
}
EngineCounters Engine::GetCounters() const {
  return impl_->memcg.GetCounters();
}
int Engine::nr_cpus() const { return impl_->memcg.nr_cpus(); }
uint64_t Engine::page_size_bytes() const {
  return impl_->memcg.page_size_bytes();
}
uint64_t Engine::page_counter_max() const {
  return impl_->memcg.page_counter_max();
}

}  // namespace cgacct
