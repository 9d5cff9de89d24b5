// CudaDriver is libcuda, loaded at run time and never linked: dlopen("libcuda.so.1") (or the
// library $DEPOT_LIBCUDA names) and cuGetProcAddress for each entry point, typed with the
// versioned PFN_* typedefs of cudaTypedefs.h. The daemon and the client library both use it; a
// machine without a driver or a GPU gets the reason instead of a driver.
//
// Only built where the CUDA toolkit's headers are (DEPOT_HAVE_CUDA).
#ifndef DEPOT_COMMON_CUDA_DRIVER_H_
#define DEPOT_COMMON_CUDA_DRIVER_H_

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

#include "depot/status.h"

namespace depot {

struct CudaDriver {
  PFN_cuGetErrorString_v6000 GetErrorString;
  PFN_cuDriverGetVersion_v2020 DriverGetVersion;
  PFN_cuDeviceGetCount_v2000 DeviceGetCount;
  PFN_cuDeviceGet_v2000 DeviceGet;
  PFN_cuDeviceGetName_v2000 DeviceGetName;
  PFN_cuDeviceGetUuid_v11040 DeviceGetUuid;
  PFN_cuDeviceTotalMem_v3020 DeviceTotalMem;
  PFN_cuDeviceGetAttribute_v2000 DeviceGetAttribute;
  PFN_cuDevicePrimaryCtxRetain_v7000 DevicePrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease_v11000 DevicePrimaryCtxRelease;
  PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
  PFN_cuCtxPushCurrent_v4000 CtxPushCurrent;
  PFN_cuCtxPopCurrent_v4000 CtxPopCurrent;
  PFN_cuCtxGetCurrent_v4000 CtxGetCurrent;
  PFN_cuCtxGetDevice_v2000 CtxGetDevice;
  PFN_cuStreamGetCtx_v9020 StreamGetCtx;
  PFN_cuMemGetAllocationGranularity_v10020 MemGetAllocationGranularity;
  PFN_cuMemCreate_v10020 MemCreate;
  PFN_cuMemRelease_v10020 MemRelease;
  PFN_cuMemExportToShareableHandle_v10020 MemExportToShareableHandle;
  PFN_cuMemImportFromShareableHandle_v10020 MemImportFromShareableHandle;
  PFN_cuMemAddressReserve_v10020 MemAddressReserve;
  PFN_cuMemAddressFree_v10020 MemAddressFree;
  PFN_cuMemMap_v10020 MemMap;
  PFN_cuMemUnmap_v10020 MemUnmap;
  PFN_cuMemSetAccess_v10020 MemSetAccess;
  PFN_cuDeviceCanAccessPeer_v4000 DeviceCanAccessPeer;
  PFN_cuStreamSynchronize_v2000 StreamSynchronize;
  PFN_cuMemHostRegister_v6050 MemHostRegister;
  PFN_cuMemHostUnregister_v4000 MemHostUnregister;
  PFN_cuMemcpyHtoD_v3020 MemcpyHtoD;
  // For tests and benchmarks.
  PFN_cuMemcpyDtoH_v3020 MemcpyDtoH;
  PFN_cuMemcpyDtoD_v3020 MemcpyDtoD;
  PFN_cuMemsetD32_v3020 MemsetD32;
  PFN_cuMemAlloc_v3020 MemAlloc;
  PFN_cuMemFree_v3020 MemFree;
  PFN_cuCtxSynchronize_v2000 CtxSynchronize;
  PFN_cuMemGetInfo_v3020 MemGetInfo;
  PFN_cuMemGetAccess_v10020 MemGetAccess;
  PFN_cuLaunchHostFunc_v10000 LaunchHostFunc;
  PFN_cuStreamCreate_v2000 StreamCreate;
  PFN_cuStreamDestroy_v4000 StreamDestroy;
  PFN_cuMemcpyDtoDAsync_v3020 MemcpyDtoDAsync;
  PFN_cuDevicePrimaryCtxGetState_v7000 DevicePrimaryCtxGetState;
  int driver_version = 0;

  // "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  std::string Error(CUresult r, const char* call) const;
};

// The driver, loaded and initialised (cuInit) once per process. Unavailable with the reason
// ("cannot load libcuda.so.1: ...", "no CUDA device") when it cannot be. A failure is not kept:
// the next call tries again, so that a GPU whose kernel modules load late is found later.
// Unavailable, saying why, in a child forked after the driver was loaded (CUDA does not support
// fork).
Result<const CudaDriver*> LoadCudaDriver();

// A UUID in nvidia-smi's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, or MIG-... for a MIG
// instance (as CUDA_VISIBLE_DEVICES and nvidia-smi -L write it).
std::string FormatGpuUuid(const CUuuid& uuid, bool mig = false);

// The UUID of `dev` in that form; a MIG instance is told by its name ("... MIG 1g.10gb"), which
// is all the driver API says of it. Unavailable, naming the call, when the driver cannot say.
Result<std::string> DeviceUuid(const CudaDriver& cu, CUdevice dev);

}  // namespace depot

#endif  // DEPOT_COMMON_CUDA_DRIVER_H_
