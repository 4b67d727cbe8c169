"""KIP-405 tiered storage: the RSM/RLMM plugin contracts (tiered.api) and the RemoteLogManager.

Layer 2 of tierlog; implements core's remote-tier seam.
"""
