# The shell every box with `nix: true` starts in: `nix develop /etc/base-flake`.
# Installed to /etc/base-flake by install.sh. Projects with their own flake use that instead.
{
  description = "ag-box base development shell";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in
    {
      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          packages = with pkgs; [
            git
            ripgrep
            fd
            jq
            curl
            nodejs
            python3
            gnumake
            gcc
          ];
        };
      });
    };
}
