#include <iostream>

#include "app/cli.h"
#include "base/fatal.h"

extern char** environ;

int main(int argc, char** argv) {
  kvserve::base::InstallFatalHandlers();
  return kvserve::app::RunCli(argc, argv, environ, std::cout, std::cerr);
}
